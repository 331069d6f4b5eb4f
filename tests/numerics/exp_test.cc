// exp_f32 / sigmoid_f32: accuracy against libm's double exp, and the AVX-512 and AVX2 lanes
// against the scalar functions bit for bit.
// ctest-file-label: quick
#include "numerics/exp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/cpu_features.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_exp_inl.h"
FP8RL_AVX512_END
FP8RL_AVX2_BEGIN
#include "numerics/avx2_exp_inl.h"
FP8RL_AVX2_END

namespace fp8rl {
namespace {

FP8RL_AVX512_BEGIN
void exp_lanes(const float* x, float* y, int64_t n, bool sigmoid) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, sigmoid ? avx512::sigmoid16(v) : avx512::exp16(v));
  }
}
FP8RL_AVX512_END

FP8RL_AVX2_BEGIN
void exp_lanes_avx2(const float* x, float* y, int64_t n, bool sigmoid) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, sigmoid ? avx2::sigmoid8(v) : avx2::exp8(v));
  }
  if (i < n) {  // the tail through a padded copy
    float in[8] = {}, out[8];
    for (int64_t j = i; j < n; ++j) in[j - i] = x[j];
    const __m256 v = _mm256_loadu_ps(in);
    _mm256_storeu_ps(out, sigmoid ? avx2::sigmoid8(v) : avx2::exp8(v));
    for (int64_t j = i; j < n; ++j) y[j] = out[j - i];
  }
}
FP8RL_AVX2_END

// Every 4099th FP32 pattern (about a million values over all signs and binades), dense sweeps of
// the interesting ranges (subnormal results, overflow, around 0), and the special values.
std::vector<float> sample_inputs() {
  std::vector<float> xs;
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += 4099) xs.push_back(std::bit_cast<float>(static_cast<uint32_t>(b)));
  auto sweep = [&](float lo, float hi, int n) {
    for (int i = 0; i <= n; ++i) xs.push_back(lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n));
  };
  sweep(-105.0f, -86.0f, 200000);  // subnormal results and underflow to 0
  sweep(86.0f, 90.0f, 50000);      // the largest finite results and overflow
  sweep(-1.0f, 1.0f, 200000);
  for (float x : {0.0f, -0.0f, 1.0f, -1.0f, 88.7228394f, 88.7228317f, -87.3365479f, -103.972076f, -103.972084f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min()})
    xs.push_back(x);
  return xs;
}

// |y - exp(x)| in units of the last place of the FP32 value nearest exp(x) (2^-149 for subnormals).
double ulp_error(float y, float x) {
  const double exact = std::exp(static_cast<double>(x));
  if (std::isinf(y) && exact > static_cast<double>(std::numeric_limits<float>::max())) return 0.0;
  int e = 0;
  std::frexp(exact, &e);  // exact = m 2^e, m in [0.5, 1)
  const double ulp = std::ldexp(1.0, std::max(e - 24, -149));
  return std::fabs(static_cast<double>(y) - exact) / ulp;
}

TEST(Exp, WithinTwoUlpOfTheExactExponential) {
  double worst = 0.0;
  float worst_x = 0.0f;
  for (float x : sample_inputs()) {
    if (std::isnan(x)) continue;
    const double err = ulp_error(exp_f32(x), x);
    if (err > worst) worst = err, worst_x = x;
  }
  std::printf("exp_f32: worst error %.3f ulp at x = %.9g\n", worst, static_cast<double>(worst_x));
  EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
}

TEST(Exp, SpecialValues) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_f32(0.0f), 1.0f);
  EXPECT_EQ(exp_f32(-0.0f), 1.0f);
  EXPECT_EQ(exp_f32(inf), inf);
  EXPECT_EQ(exp_f32(89.0f), inf);
  EXPECT_EQ(exp_f32(-inf), 0.0f);
  EXPECT_EQ(exp_f32(-104.0f), 0.0f);
  EXPECT_GT(exp_f32(-103.0f), 0.0f);  // a subnormal, not flushed
  EXPECT_TRUE(std::isnan(exp_f32(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(sigmoid_f32(0.0f), 0.5f);
  EXPECT_EQ(sigmoid_f32(-inf), 0.0f);
  EXPECT_EQ(sigmoid_f32(inf), 1.0f);
  EXPECT_EQ(sigmoid_f32(-200.0f), 0.0f);
}

// Runs a lane-parallel exp / sigmoid over sample_inputs() and compares every result with the
// scalar twin bit for bit (NaN: any NaN).
void expect_lanes_give_the_scalar_bits(void (*lanes)(const float*, float*, int64_t, bool)) {
  const std::vector<float> xs = sample_inputs();
  std::vector<float> y(xs.size());
  for (bool sigmoid : {false, true}) {
    lanes(xs.data(), y.data(), static_cast<int64_t>(xs.size()), sigmoid);
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = sigmoid ? sigmoid_f32(xs[i]) : exp_f32(xs[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(y[i])) << "x = " << xs[i];
        continue;
      }
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(want))
          << (sigmoid ? "sigmoid" : "exp") << " x = " << xs[i] << " (bits 0x" << std::hex
          << std::bit_cast<uint32_t>(xs[i]) << ")";
    }
  }
}

TEST(Exp, Avx512LanesGiveTheScalarBits) {
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "no AVX-512 on this CPU";
  expect_lanes_give_the_scalar_bits(exp_lanes);
}

TEST(Exp, Avx2LanesGiveTheScalarBits) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 on this CPU";
  expect_lanes_give_the_scalar_bits(exp_lanes_avx2);
}

}  // namespace
}  // namespace fp8rl
