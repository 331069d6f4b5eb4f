// Bad input to the quantizers raises fp8rl::Error with a message that says what was wrong.
// ctest-file-label: quick
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

#include <vector>

#include "core/check.h"
#include "numerics/quantize.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

using testing::error_message;

TEST(QuantizeErrors, RejectsWrongRankDtypeStrideAndNullData) {
  std::vector<float> x(64);
  const TensorView three_d = TensorView::contiguous(x.data(), DType::kF32, Shape{2, 4, 8});
  EXPECT_THAT(error_message([&] { quantize(three_d, ScalingMode::kRows1x128, ScaleFormat::kFp32); }),
              HasSubstr("expected a 2-D tensor, got f32[2, 4, 8]"));
  const TensorView ints = TensorView::contiguous(x.data(), DType::kI32, Shape{8, 8});
  EXPECT_THAT(error_message([&] { quantize(ints, ScalingMode::kRows1x128, ScaleFormat::kFp32); }),
              HasSubstr("expected dtype f32 or bf16, got i32[8, 8]"));
  TensorView col_strided = TensorView::contiguous(x.data(), DType::kF32, Shape{4, 8});
  col_strided.strides = {16, 2};
  EXPECT_THAT(error_message([&] { quantize(col_strided, ScalingMode::kRows1x128, ScaleFormat::kFp32); }),
              HasSubstr("columns must be contiguous"));
  const TensorView null = TensorView::contiguous(nullptr, DType::kF32, Shape{4, 8});
  EXPECT_THAT(error_message([&] { quantize(null, ScalingMode::kRows1x128, ScaleFormat::kFp32); }),
              HasSubstr("null data pointer"));
}

TEST(QuantizeErrors, RejectsUnsupportedModeAndFormat) {
  std::vector<float> x(64);
  const TensorView v = TensorView::contiguous(x.data(), DType::kF32, Shape{8, 8});
  EXPECT_THAT(error_message([&] { quantize(v, static_cast<ScalingMode>(9), ScaleFormat::kFp32); }),
              HasSubstr("unsupported scaling mode 9"));
  EXPECT_THAT(error_message([&] { quantize(v, ScalingMode::kRows1x128, static_cast<ScaleFormat>(5)); }),
              HasSubstr("unsupported scale format 5"));
}

TEST(QuantizeErrors, RejectsMismatchedShapes) {
  std::vector<float> x(64);
  const TensorView v = TensorView::contiguous(x.data(), DType::kF32, Shape{8, 8});
  QuantizedTensor wrong(ScalingMode::kRows1x128, 8, 16, ScaleFormat::kFp32, false);
  EXPECT_THAT(error_message([&] { quantize_into(v, wrong); }),
              HasSubstr("does not match the destination's shape [8, 16]"));
  const QuantizedTensor q = quantize(v, ScalingMode::kRows1x128, ScaleFormat::kFp32);
  std::vector<float> out(32);
  EXPECT_THAT(error_message([&] { dequantize(q.rowwise, TensorView::contiguous(out.data(), DType::kF32, Shape{4, 8})); }),
              HasSubstr("does not match the quantized shape [8, 8]"));
  QuantizedTensor broken = q.clone();
  broken.rowwise.scale_inv = AlignedBuffer<float>(3);
  EXPECT_THAT(error_message([&] { quantize_into(v, broken); }), HasSubstr("scale_inv.size()"));
}

}  // namespace
}  // namespace fp8rl
