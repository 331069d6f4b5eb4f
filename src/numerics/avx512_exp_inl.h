// exp_f32 and sigmoid_f32 (exp.h) on 16 lanes, bit-identical to the scalar functions: the same
// operations in the same order, lane by lane.
//
// Include this only inside an FP8RL_AVX512_BEGIN ... FP8RL_AVX512_END region of a kernel file
// (see simd_target.h). tests/numerics/exp_test.cc compares the lanes with exp_f32.
#pragma once

#include "numerics/exp.h"
#include "numerics/simd_target.h"

namespace fp8rl::avx512 {
namespace {

inline __m512 exp16(__m512 x) {
  using namespace exp_detail;
  // max/min return their second operand when either is NaN: NaN lanes stay NaN.
  x = _mm512_min_ps(_mm512_set1_ps(kMaxArg), _mm512_max_ps(_mm512_set1_ps(kMinArg), x));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(kLn2Hi))),
                                 _mm512_mul_ps(n, _mm512_set1_ps(kLn2Lo)));
  __m512 p = _mm512_set1_ps(kInvFactorial[0]);
  for (int i = 1; i < 6; ++i) p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(kInvFactorial[i]));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);  // p * 2^n, rounded once (as ldexp)
}

inline __m512 sigmoid16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 minus_x = _mm512_xor_ps(x, _mm512_set1_ps(-0.0f));  // exact, as the scalar -x
  return _mm512_div_ps(one, _mm512_add_ps(one, exp16(minus_x)));
}

}  // namespace
}  // namespace fp8rl::avx512
