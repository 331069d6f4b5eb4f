// Linear: a forward that takes another linear's copies of the same input (q/k/v, gate/up) gives
// the bits of one that makes its own, forward and backward.
// ctest-file-label: quick
#include "model/linear.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/rng.h"

namespace fp8rl {
namespace {

std::vector<float> randn(int64_t n, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, 0.0f, 1.0f, 5, stream);
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(Linear, SharedInputGivesTheSameBitsAsOwnCopies) {
  const int64_t M = 130, K = 200, N = 96;
  const std::vector<float> x = randn(M * K, 1), w1 = randn(N * K, 2), w2 = randn(N * K, 3), dy = randn(M * N, 4);
  for (Precision p : {Precision::kF32, Precision::kBF16, Precision::kFP8}) {
    Linear first("first", N, K, p, ScaleFormat::kFp32, ScaleFormat::kFp32, true);
    Linear second("second", N, K, p, ScaleFormat::kFp32, ScaleFormat::kFp32, true);
    first.refresh_weights(w1.data());
    second.refresh_weights(w2.data());
    ASSERT_TRUE(second.can_share_input(first));
    LinearCache c1, own, shared;
    std::vector<float> y1(static_cast<size_t>(M * N)), y_own(y1.size()), y_shared(y1.size());
    first.forward(y1.data(), x.data(), M, c1);
    second.forward(y_own.data(), x.data(), M, own);
    second.forward(y_shared.data(), x.data(), M, shared, true, &c1);
    EXPECT_TRUE(same_bits(y_own, y_shared)) << precision_name(p);
    std::vector<float> dx_own(static_cast<size_t>(M * K)), dx_shared(dx_own.size());
    std::vector<float> dw_own(static_cast<size_t>(N * K), 0.0f), dw_shared(dw_own.size(), 0.0f);
    second.backward(dx_own.data(), false, dw_own.data(), dy.data(), M, own);
    second.backward(dx_shared.data(), false, dw_shared.data(), dy.data(), M, shared);
    EXPECT_TRUE(same_bits(dx_own, dx_shared)) << precision_name(p);
    EXPECT_TRUE(same_bits(dw_own, dw_shared)) << precision_name(p);
  }
}

TEST(Linear, SharingNeedsTheSamePrecisionAndAMatchingInput) {
  const int64_t M = 8, K = 128, N = 16;
  const std::vector<float> x = randn(M * K, 1), w = randn(N * K, 2);
  Linear bf16("bf16", N, K, Precision::kBF16, ScaleFormat::kFp32, ScaleFormat::kFp32, true);
  Linear fp8("fp8", N, K, Precision::kFP8, ScaleFormat::kFp32, ScaleFormat::kFp32, true);
  EXPECT_FALSE(fp8.can_share_input(bf16));
  bf16.refresh_weights(w.data());
  fp8.refresh_weights(w.data());
  LinearCache c_bf16, c_fp8, c;
  std::vector<float> y(static_cast<size_t>(M * N));
  bf16.forward(y.data(), x.data(), M, c_bf16);
  fp8.forward(y.data(), x.data(), M, c_fp8, /*save_for_backward=*/false);
  // The FP8 cache has no column-wise copy; a forward that saves for backward cannot use it.
  EXPECT_THROW(fp8.forward(y.data(), x.data(), M, c, true, &c_fp8), Error);
  EXPECT_THROW(fp8.forward(y.data(), x.data(), M, c, true, &c_bf16), Error);  // no FP8 copy there
}

}  // namespace
}  // namespace fp8rl
