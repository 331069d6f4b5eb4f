// ctest-file-label: quick
#include "core/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "core/check.h"

namespace fp8rl {
namespace {

TEST(Tensor, ContiguousRowMajorStridesAndAlignment) {
  Tensor t(DType::kBF16, Shape{2, 3, 5});
  const TensorView v = t.view();
  EXPECT_EQ(v.numel(), 30);
  EXPECT_EQ(v.strides[0], 15);
  EXPECT_EQ(v.strides[1], 5);
  EXPECT_EQ(v.strides[2], 1);
  EXPECT_TRUE(v.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<void>()) % kBufferAlignment, 0u);
  for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<uint16_t>()[i], 0);
  EXPECT_EQ(v.str(), "bf16[2, 3, 5] strides [15, 5, 1]");
}

TEST(Tensor, StridedMatrixViewIsNotContiguous) {
  float data[12] = {};
  const TensorView v = TensorView::matrix(data, DType::kF32, 3, 3, 4);
  EXPECT_EQ(v.strides[0], 4);
  EXPECT_FALSE(v.is_contiguous());
  EXPECT_THROW(TensorView::matrix(data, DType::kF32, 3, 5, 4), Error);
}

TEST(Tensor, CloneIsDeepAndMoveKeepsData) {
  Tensor a(DType::kF32, Shape{4});
  a.data<float>()[2] = 5.0f;
  Tensor b = a.clone();
  b.data<float>()[2] = 6.0f;
  EXPECT_EQ(a.data<float>()[2], 5.0f);
  Tensor c = std::move(a);
  EXPECT_EQ(c.data<float>()[2], 5.0f);
}

TEST(Tensor, BadShapesAreRejected) {
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
  EXPECT_THROW((Shape{2, -1}), Error);
}

}  // namespace
}  // namespace fp8rl
