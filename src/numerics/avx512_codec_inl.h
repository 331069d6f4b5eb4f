// AVX-512 building blocks of the E4M3 / BF16 codecs, shared by the kernel files.
//
// Include this only inside an FP8RL_AVX512_BEGIN ... FP8RL_AVX512_END region of a kernel file
// (see simd_target.h). Every function here is bit-identical to its scalar twin in e4m3.h /
// bf16.h; tests/numerics compare them exhaustively.
#pragma once

#include <cstdint>

#include "numerics/codec.h"
#include "numerics/simd_target.h"

namespace fp8rl::avx512 {
namespace {

// 16 FP32 values -> 16 E4M3 codes (same rules as f32_to_e4m3).
inline __m128i e4m3_encode16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i sign = _mm512_and_si512(_mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80));
  __m512i abs_bits = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_bits, _mm512_set1_epi32(0x7F800000));
  // Saturation: positive float bit patterns order like the floats, so an integer min clamps
  // |x| (including Inf) to 448. NaN is handled by the mask above.
  abs_bits = _mm512_min_epi32(abs_bits, _mm512_set1_epi32(0x43E00000));
  const __mmask16 is_small = _mm512_cmplt_epi32_mask(abs_bits, _mm512_set1_epi32(0x3C800000));
  // Normal range: round the mantissa to 3 bits, ties to even, then rebias the exponent.
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(abs_bits, 20), _mm512_set1_epi32(1));
  const __m512i rounded = _mm512_add_epi32(abs_bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFFF)));
  const __m512i normal = _mm512_sub_epi32(_mm512_srli_epi32(rounded, 20), _mm512_set1_epi32(960));
  // Below 2^-6: let the FP32 adder round to the 2^-9 grid (see f32_to_e4m3).
  const __m512 shifted = _mm512_add_ps(_mm512_castsi512_ps(abs_bits), _mm512_set1_ps(16384.0f));
  const __m512i small = _mm512_sub_epi32(_mm512_castps_si512(shifted), _mm512_set1_epi32(0x46800000));
  __m512i code = _mm512_mask_blend_epi32(is_small, normal, small);
  code = _mm512_mask_mov_epi32(code, is_nan, _mm512_set1_epi32(0x7F));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// 16 FP32 values -> 16 BF16 patterns (same rules as f32_to_bf16).
inline __m256i bf16_encode16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i abs_bits = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_bits, _mm512_set1_epi32(0x7F800000));
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), 16);
  const __m512i quiet_nan = _mm512_or_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(0x40));
  rounded = _mm512_mask_mov_epi32(rounded, is_nan, quiet_nan);
  return _mm512_cvtepi32_epi16(rounded);
}

// 16 BF16 patterns -> 16 FP32 values (exact).
inline __m512 bf16_decode16(__m256i h) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

// Absolute-value bit patterns of 16 FP32 values; their unsigned maximum is the block amax, with
// any NaN (pattern above 0x7F800000) winning over every number, so a NaN block reads as
// non-finite.
inline __m512i abs_bits16(__m512 x) {
  return _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7FFFFFFF));
}

// E4M3 -> BF16 for 64 codes with two vpermi2b lookups (high and low byte of the BF16 pattern of
// each magnitude), the sign merged into the high byte, and byte interleaves. The interleaves
// work within 128-bit lanes, so the codes are first permuted such that the outputs come out in
// order: out_lo = codes 0..31, out_hi = codes 32..63.
class E4m3Decoder {
 public:
  E4m3Decoder() {
    const auto& t = detail::e4m3_decode_tables();
    high0_ = _mm512_load_si512(t.bf16_high);
    high1_ = _mm512_load_si512(t.bf16_high + 64);
    low0_ = _mm512_load_si512(t.bf16_low);
    low1_ = _mm512_load_si512(t.bf16_low + 64);
    // Lane j of the permuted codes: bytes 0..7 <- codes 8j..8j+7, bytes 8..15 <- codes 32+8j..
    alignas(64) uint8_t order[64];
    for (int j = 0; j < 4; ++j)
      for (int b = 0; b < 16; ++b) order[16 * j + b] = static_cast<uint8_t>(b < 8 ? 8 * j + b : 32 + 8 * j + b - 8);
    order_ = _mm512_load_si512(order);
  }

  inline void decode64(__m512i codes, __m512i* out_lo, __m512i* out_hi) const {
    const __m512i c = _mm512_permutexvar_epi8(order_, codes);
    // vpermi2b uses index bits 0..6, so the sign bit does not disturb the lookup.
    __m512i high = _mm512_permutex2var_epi8(high0_, c, high1_);
    const __m512i low = _mm512_permutex2var_epi8(low0_, c, low1_);
    high = _mm512_ternarylogic_epi32(high, c, _mm512_set1_epi8(static_cast<char>(0x80)), 0xF8);  // high | (c & 0x80)
    *out_lo = _mm512_unpacklo_epi8(low, high);
    *out_hi = _mm512_unpackhi_epi8(low, high);
  }

 private:
  __m512i high0_, high1_, low0_, low1_, order_;
};

// Mask selecting the first `count` (0..64) bytes.
inline __mmask64 first_bytes_mask(int64_t count) {
  return count >= 64 ? ~__mmask64{0} : ((__mmask64{1} << count) - 1);
}

}  // namespace
}  // namespace fp8rl::avx512
