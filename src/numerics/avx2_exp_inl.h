// exp_f32 and sigmoid_f32 (exp.h) on 8 lanes, bit-identical to the scalar functions: the same
// operations in the same order, lane by lane (the AVX2 twin of avx512_exp_inl.h).
//
// Include this only inside an FP8RL_AVX2_BEGIN ... FP8RL_AVX2_END region of a kernel file (see
// simd_target.h). tests/numerics/exp_test.cc compares the lanes with exp_f32.
#pragma once

#include "numerics/exp.h"
#include "numerics/simd_target.h"

namespace fp8rl::avx2 {
namespace {

// 2^k for integer lanes k in [-126, 127], exactly.
inline __m256 pow2_8(__m256i k) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k, _mm256_set1_epi32(127)), 23));
}

inline __m256 exp8(__m256 x) {
  using namespace exp_detail;
  // max/min return their second operand when either is NaN: NaN lanes stay NaN.
  x = _mm256_min_ps(_mm256_set1_ps(kMaxArg), _mm256_max_ps(_mm256_set1_ps(kMinArg), x));
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(kLn2Hi))),
                                 _mm256_mul_ps(n, _mm256_set1_ps(kLn2Lo)));
  __m256 p = _mm256_set1_ps(kInvFactorial[0]);
  for (int i = 1; i < 6; ++i) p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(kInvFactorial[i]));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(1.0f));
  // ldexp(p, n) without scalef: n in [-150, 128] splits into n1 = floor(n / 2) and n2 = n - n1,
  // both in [-75, 64], so 2^n1 and 2^n2 are normal FP32 values. p lies in [0.7, 1.5), so p * 2^n1
  // is exact (a normal number), and the second multiply rounds the exact p * 2^n once: the
  // ldexp result, subnormal results and overflow to +Inf included. (A NaN lane's p is NaN, and
  // NaN * anything keeps the first operand's NaN, whatever the junk n becomes.)
  const __m256i ni = _mm256_cvtps_epi32(n);  // exact: n is an integer
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  return _mm256_mul_ps(_mm256_mul_ps(p, pow2_8(n1)), pow2_8(_mm256_sub_epi32(ni, n1)));
}

inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 minus_x = _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));  // exact, as the scalar -x
  return _mm256_div_ps(one, _mm256_add_ps(one, exp8(minus_x)));
}

}  // namespace
}  // namespace fp8rl::avx2
