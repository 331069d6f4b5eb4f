// The scale rule of docs/recipe.md section 3, shared by every quantizer (trainer and generator,
// weights, activations and gradients), so that both engines produce the same bytes.
//
// A block with absolute maximum `amax` gets the quantization multiplier
//   qs = 448 / amax                  (correctly rounded FP32 division)
//   qs = 1        if amax == 0 or amax is not finite (Inf, or a NaN anywhere in the block)
//   qs = FLT_MAX  if 448 / amax overflows to +Inf (amax below 448 / FLT_MAX, i.e. tiny
//                 subnormals; the same guard as TransformerEngine's scale computation)
// and, with power-of-two scales, qs with its mantissa bits cleared (rounded down to a power of
// two). Codes are q = e4m3(x * qs); the stored dequantization scale is s = 1 / qs (FP32), so
// x ~= q * s.
#pragma once

#include <bit>
#include <cstdint>
#include <limits>

namespace fp8rl {

enum class ScaleFormat : uint8_t {
  kFp32,  // qs = 448 / amax as computed
  kPow2,  // qs rounded down to a power of two, so s = 1 / qs is exact
};

// `amax_bits` is the FP32 bit pattern of the block's absolute maximum, where any pattern above
// 0x7F800000 (a NaN) means the block held a NaN.
inline float quant_multiplier_from_amax_bits(uint32_t amax_bits, ScaleFormat format) {
  float qs = 1.0f;
  if (amax_bits != 0 && amax_bits < 0x7F800000u) {
    qs = 448.0f / std::bit_cast<float>(amax_bits);
    if (qs > std::numeric_limits<float>::max()) qs = std::numeric_limits<float>::max();
  }
  if (format == ScaleFormat::kPow2) qs = std::bit_cast<float>(std::bit_cast<uint32_t>(qs) & 0xFF800000u);
  return qs;
}

}  // namespace fp8rl
