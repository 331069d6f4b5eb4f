// bfloat16 scalar codec: the oracle for every vectorised BF16 conversion.
//
// BF16 values are carried as uint16_t bit patterns (the upper half of an FP32 pattern).
#pragma once

#include <bit>
#include <cstdint>

namespace fp8rl {

using bf16_t = uint16_t;

// Exact: every BF16 value is an FP32 value.
constexpr float bf16_to_f32(bf16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }

// Round to nearest, ties to even. Overflow rounds to +-Inf as IEEE requires; NaN stays NaN
// (made quiet, sign kept); subnormals are kept, never flushed.
constexpr bf16_t f32_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<bf16_t>((bits >> 16) | 0x0040u);
  const uint32_t rounding_bias = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<bf16_t>((bits + rounding_bias) >> 16);
}

}  // namespace fp8rl
