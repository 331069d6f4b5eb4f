// AVX2 building blocks of the E4M3 / BF16 codecs, shared by the AVX2 kernel files.
//
// Include this only inside an FP8RL_AVX2_BEGIN ... FP8RL_AVX2_END region of a kernel file (see
// simd_target.h). Every function here is bit-identical to its scalar twin in e4m3.h / bf16.h;
// tests/numerics compare them exhaustively through the codec's AVX2 path.
#pragma once

#include <cstdint>

#include "numerics/simd_target.h"

namespace fp8rl::avx2 {
namespace {

// 8 E4M3 codes (the low 8 bytes of `codes`) -> 8 FP32 values, exact.
//
// The magnitude bits shifted into place, m << 20, are an FP32 pattern whose exponent field is the
// E4M3 exponent e and whose mantissa is the E4M3 mantissa: 2^(e-127) (1 + m/8) for e > 0 and the
// FP32 subnormal m 2^-129 for e = 0. One exact multiply by 2^120 rebiases both cases to the E4M3
// value (2^(e-7) (1 + m/8), resp. m 2^-9). This needs subnormal inputs honoured (MXCSR DAZ off,
// the default). The sign is ORed in afterwards and the NaN code (magnitude 0x7F, which would
// come out as 480) is replaced by the scalar codec's quiet NaN.
inline __m256 e4m3_decode8(__m128i codes) {
  const __m256i c = _mm256_cvtepu8_epi32(codes);
  const __m256i magnitude = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
  const __m256 value = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(magnitude, 20)),
                                     _mm256_castsi256_ps(_mm256_set1_epi32(0x7B800000)));  // 2^120
  const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
  const __m256i is_nan = _mm256_cmpeq_epi32(magnitude, _mm256_set1_epi32(0x7F));
  const __m256i bits = _mm256_blendv_epi8(_mm256_castps_si256(value), _mm256_set1_epi32(0x7FC00000), is_nan);
  return _mm256_castsi256_ps(_mm256_or_si256(bits, sign));
}

// 8 BF16 patterns -> 8 FP32 values (exact).
inline __m256 bf16_decode8(__m128i h) { return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16)); }

// 8 FP32 values -> 8 BF16 patterns in 32-bit lanes (0..0xFFFF), same rules as f32_to_bf16:
// round to nearest even, NaN kept (made quiet) with its sign and high payload bits.
inline __m256i bf16_encode8_lanes(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  const __m256i abs_bits = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(0x7F800000));
  const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(1));
  const __m256i rounded =
      _mm256_srli_epi32(_mm256_add_epi32(bits, _mm256_add_epi32(odd, _mm256_set1_epi32(0x7FFF))), 16);
  const __m256i quiet_nan = _mm256_or_si256(_mm256_srli_epi32(bits, 16), _mm256_set1_epi32(0x40));
  return _mm256_blendv_epi8(rounded, quiet_nan, is_nan);
}

// 8 FP32 values -> 8 BF16 patterns.
inline __m128i bf16_encode8(__m256 x) {
  const __m256i lanes = bf16_encode8_lanes(x);
  // Both 128-bit halves packed to 16 bits (lanes are <= 0xFFFF, so the unsigned pack is exact).
  return _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
}

// bf16_decode8(bf16_encode8(x)) without leaving the 32-bit lanes.
inline __m256 bf16_round8(__m256 x) { return _mm256_castsi256_ps(_mm256_slli_epi32(bf16_encode8_lanes(x), 16)); }

// 8 FP32 values -> 8 E4M3 codes as 32-bit lanes (0..0xFF), same rules as f32_to_e4m3; the
// algorithm of avx512::e4m3_encode16_lanes (one FP32 add rounds to the E4M3 grid).
inline __m256i e4m3_encode8_lanes(__m256 x) {
  const __m256i bits = _mm256_castps_si256(x);
  __m256i abs_bits = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
  const __m256i is_nan = _mm256_cmpgt_epi32(abs_bits, _mm256_set1_epi32(0x7F800000));
  abs_bits = _mm256_min_epu32(abs_bits, _mm256_set1_epi32(0x43E00000));  // saturate to 448 (Inf too)
  const __m256i pow_e = _mm256_max_epu32(_mm256_and_si256(abs_bits, _mm256_set1_epi32(0x7F800000)),
                                         _mm256_set1_epi32(0x3C800000));  // 2^max(e, -6)
  const __m256i c = _mm256_add_epi32(pow_e, _mm256_set1_epi32(20 << 23));
  const __m256 sum = _mm256_add_ps(_mm256_castsi256_ps(abs_bits), _mm256_castsi256_ps(c));
  const __m256i k = _mm256_sub_epi32(_mm256_castps_si256(sum), c);
  const __m256i base = _mm256_sub_epi32(_mm256_srli_epi32(pow_e, 20), _mm256_set1_epi32(8 * 121));
  __m256i code = _mm256_add_epi32(k, base);
  code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F), is_nan);
  const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
  return _mm256_or_si256(code, sign);
}

// 8 FP32 values -> 8 E4M3 codes in the low 8 bytes.
inline __m128i e4m3_encode8(__m256 x) {
  const __m256i lanes = e4m3_encode8_lanes(x);
  const __m128i words = _mm_packus_epi32(_mm256_castsi256_si128(lanes), _mm256_extracti128_si256(lanes, 1));
  return _mm_packus_epi16(words, words);
}

// Absolute-value bit patterns of 8 FP32 values; their unsigned maximum is the block amax, a NaN
// (pattern above 0x7F800000) winning over every number.
inline __m256i abs_bits8(__m256 x) { return _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(0x7FFFFFFF)); }

// Mask for _mm256_maskload_ps / _mm256_maskstore_ps selecting the first `count` (0..8) lanes.
inline __m256i first_lanes_mask(int64_t count) {
  const __m256i index = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count < 8 ? count : 8)), index);
}

}  // namespace
}  // namespace fp8rl::avx2
