// OCP FP8 E4M3 "FN" scalar codec: the oracle for every vectorised FP8 conversion.
//
// Bit layout S.EEEE.MMM, exponent bias 7, no infinities. S.1111.111 (0x7F, 0xFF) is NaN.
// Largest finite 448 = 1.75 * 2^8 (0x7E), smallest normal 2^-6 (0x08), smallest subnormal 2^-9
// (0x01). Every E4M3 value is exact in BF16 and FP32.
//
// Encoding (see docs/numerics.md, pinned by tests/numerics/e4m3_encode_test.cc):
//   * round to nearest, ties to even;
//   * finite values beyond +-448 and +-Inf saturate to +-448 ("satfinite");
//   * NaN encodes as S.1111.111 with the input's sign; -0 encodes as 0x80;
//   * the sign is always kept, so tiny negative values round to -0 (0x80).
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

#include "numerics/bf16.h"

namespace fp8rl {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr uint8_t kE4M3MaxCode = 0x7E;
inline constexpr uint8_t kE4M3NanCode = 0x7F;

constexpr bool e4m3_is_nan(uint8_t code) { return (code & 0x7F) == kE4M3NanCode; }

constexpr float e4m3_to_f32(uint8_t code) {
  const uint32_t sign = static_cast<uint32_t>(code & 0x80) << 24;
  const uint32_t exponent = (code >> 3) & 0xF;
  const uint32_t mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7FC00000u);
  if (exponent == 0) {  // zero or subnormal: mantissa * 2^-9, exact in FP32
    const float magnitude = static_cast<float>(mantissa) * 0x1.0p-9f;
    return sign ? -magnitude : magnitude;
  }
  // Normal: rebias the exponent from 7 to 127 and widen the mantissa from 3 to 23 bits.
  return std::bit_cast<float>(sign | ((exponent + 120u) << 23) | (mantissa << 20));
}

constexpr bf16_t e4m3_to_bf16(uint8_t code) { return f32_to_bf16(e4m3_to_f32(code)); }

inline uint8_t f32_to_e4m3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs_bits = bits & 0x7FFFFFFFu;
  if (abs_bits > 0x7F800000u) return sign | kE4M3NanCode;  // NaN
  if (abs_bits >= 0x43E00000u) return sign | kE4M3MaxCode;  // >= 448, including Inf
  if (abs_bits < 0x3C800000u) {
    // Below 2^-6 the E4M3 grid is uniform with step 2^-9. Adding 2^14 (whose FP32 ulp is 2^-9)
    // makes the FP32 adder round |x| to that grid, ties to even; the low bits are then the code
    // (a result of 8 steps is 2^-6, whose code is 0x08).
    const float shifted = std::bit_cast<float>(abs_bits) + 16384.0f;
    return sign | static_cast<uint8_t>(std::bit_cast<uint32_t>(shifted) - 0x46800000u);
  }
  // Normal range: round the 23-bit mantissa to 3 bits, ties to even (a carry into the exponent
  // is the correct result), then rebias the exponent from 127 to 7 (120 << 3 == 960).
  const uint32_t rounded = abs_bits + 0x7FFFFu + ((abs_bits >> 20) & 1u);
  return sign | static_cast<uint8_t>((rounded >> 20) - 960u);
}

inline uint8_t bf16_to_e4m3(bf16_t h) { return f32_to_e4m3(bf16_to_f32(h)); }

}  // namespace fp8rl
