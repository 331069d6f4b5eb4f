// IEEE binary16 ("half", safetensors F16) to FP32: exact, since every binary16 value is an FP32
// value. fp8rl only reads F16 (checkpoints saved in float16); it never computes in it.
#pragma once

#include <bit>
#include <cstdint>

namespace fp8rl {

using f16_t = uint16_t;

// 1 sign bit, 5 exponent bits (bias 15), 10 mantissa bits; subnormals, Inf and NaN kept (a NaN
// keeps its payload, shifted into the FP32 mantissa's top bits).
constexpr float f16_to_f32(f16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1Fu;
  const uint32_t mantissa = h & 0x3FFu;
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));  // Inf, NaN
  if (exponent != 0) return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  // Zero or subnormal: mantissa * 2^-24, exact in FP32.
  const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
  return sign != 0 ? -magnitude : magnitude;
}

}  // namespace fp8rl
