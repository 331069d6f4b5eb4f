// exp_f32: the project's single-precision exponential, the oracle of its AVX-512 lanes
// (avx512_exp_inl.h).
//
// libm's expf has no vector twin and its bits may change between library versions; the softmax
// of attention and the SwiGLU gate must give the same bits in the trainer and the generator, in
// scalar and in vector code, on every machine. So exp is defined here by a fixed sequence of
// IEEE-754 single-precision operations (round to nearest even, no FMA, no flushing):
//
//   x  clamped to [-104, 89]                      (NaN passes through; e^-104 rounds to 0 and
//                                                   e^89 overflows, so the clamp changes nothing)
//   n  = rint(x * log2(e))                        (|n| <= 150)
//   r  = (x - n * L_hi) - n * L_lo                (Cody-Waite: L_hi + L_lo = ln 2, L_hi has 15
//                                                   significant bits, so n * L_hi and the first
//                                                   subtraction are exact; |r| <= 0.347)
//   p  = 1 + r (1 + r (1/2 + r (1/6 + ... + r (1/720 + r / 5040))))   (Taylor to degree 7,
//                                                   Horner, multiply then add; the truncation
//                                                   error r^8 / 8! < 6e-9 is below half an ulp)
//   exp(x) = p * 2^n                              (one rounding: ldexp, subnormal results
//                                                   rounded once, overflow to +Inf)
//
// Accuracy: within 2 ulp of the exact exponential (tests/numerics/exp_test.cc measures the worst
// case on a sweep of every binade and reports it).
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8rl {

namespace exp_detail {
inline constexpr float kMinArg = -104.0f, kMaxArg = 89.0f;
inline constexpr float kLog2e = 1.44269504f;            // log2(e) rounded to FP32 (0x3FB8AA3B)
inline constexpr float kLn2Hi = 0.693145751953125f;     // 0x3F317200: ln 2 to 15 significant bits
inline constexpr float kLn2Lo = 1.42860682e-06f;        // ln 2 - kLn2Hi rounded to FP32 (0x35BFBE8E)
// 1/k! rounded to FP32, k = 7 down to 2 (the Horner order).
inline constexpr float kInvFactorial[6] = {1.0f / 5040.0f, 1.0f / 720.0f, 1.0f / 120.0f,
                                           1.0f / 24.0f,   1.0f / 6.0f,   0.5f};
}  // namespace exp_detail

inline float exp_f32(float x) {
  using namespace exp_detail;
  if (std::isnan(x)) return x;
  x = x < kMinArg ? kMinArg : (x > kMaxArg ? kMaxArg : x);
  const float n = std::nearbyint(x * kLog2e);
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;
  float p = kInvFactorial[0];
  for (int i = 1; i < 6; ++i) p = p * r + kInvFactorial[i];
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return std::ldexp(p, static_cast<int>(n));
}

// The logistic function 1 / (1 + exp(-x)) with exp_f32 (the SwiGLU gate's sigmoid).
inline float sigmoid_f32(float x) { return 1.0f / (1.0f + exp_f32(-x)); }

}  // namespace fp8rl
