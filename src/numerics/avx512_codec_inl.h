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

// 16 FP32 values -> 16 E4M3 codes as 32-bit lanes (0..0xFF), same rules as f32_to_e4m3.
//
// One FP32 add does the rounding for normals and subnormals alike: with e = max(exponent(|x|),
// -6) and c = 2^(e+20), the FP32 ulp of c + |x| is 2^(e-3), exactly the E4M3 spacing at |x|, so
// the adder rounds |x| to the E4M3 grid with ties to even. Since c <= c + |x| < 2c, the low bits
// of the sum, k = bits(c + |x|) - bits(c), count E4M3 steps above 0 (subnormals) or above 2^e
// plus 8 (normals), and the code is 8 * (e + 6) + k; a carry into the next binade comes out
// right by itself.
inline __m512i e4m3_encode16_lanes(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  __m512i abs_bits = _mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF));
  const __mmask16 is_nan = _mm512_cmpgt_epi32_mask(abs_bits, _mm512_set1_epi32(0x7F800000));
  // Saturation: positive float bit patterns order like the floats, so an integer min clamps
  // |x| (including Inf) to 448. NaN is handled by the mask above.
  abs_bits = _mm512_min_epu32(abs_bits, _mm512_set1_epi32(0x43E00000));
  // 2^e as a bit pattern, e >= -6 (0x3C800000 is 2^-6).
  const __m512i pow_e = _mm512_max_epu32(_mm512_and_si512(abs_bits, _mm512_set1_epi32(0x7F800000)),
                                         _mm512_set1_epi32(0x3C800000));
  const __m512i c = _mm512_add_epi32(pow_e, _mm512_set1_epi32(20 << 23));
  const __m512 sum = _mm512_add_ps(_mm512_castsi512_ps(abs_bits), _mm512_castsi512_ps(c));
  // code = k + 8 (e + 6) = (bits(sum) - bits(c)) + ((bits(2^e) >> 20) - 8 * 121)
  const __m512i k = _mm512_sub_epi32(_mm512_castps_si512(sum), c);
  const __m512i base = _mm512_sub_epi32(_mm512_srli_epi32(pow_e, 20), _mm512_set1_epi32(8 * 121));
  __m512i code = _mm512_add_epi32(k, base);
  code = _mm512_mask_mov_epi32(code, is_nan, _mm512_set1_epi32(0x7F));
  // code | (sign bit moved to bit 7)
  return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(bits, 24), _mm512_set1_epi32(0x80), 0xF8);
}

// 16 FP32 values -> 16 E4M3 codes.
inline __m128i e4m3_encode16(__m512 x) { return _mm512_cvtepi32_epi8(e4m3_encode16_lanes(x)); }

// 64 FP32 values (four vectors, in order) -> 64 E4M3 codes in order. Packs with two
// saturating pack steps and one dword permutation instead of four vpmovdb.
inline __m512i e4m3_encode64(__m512 x0, __m512 x1, __m512 x2, __m512 x3) {
  const __m512i p01 = _mm512_packus_epi32(e4m3_encode16_lanes(x0), e4m3_encode16_lanes(x1));
  const __m512i p23 = _mm512_packus_epi32(e4m3_encode16_lanes(x2), e4m3_encode16_lanes(x3));
  // Lane j of the packed bytes holds dwords (x0, x1, x2, x3)[4j..4j+3]; dword i*4+j must come from j*4+i.
  const __m512i packed = _mm512_packus_epi16(p01, p23);
  const __m512i order = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
  return _mm512_permutexvar_epi32(order, packed);
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

// bf16_decode16(bf16_encode16(x)) without leaving the 32-bit lanes: the same rounding add
// (ties to even), then the low half cleared; NaNs keep their high half, made quiet.
inline __m512 bf16_round16(__m512 x) {
  const __m512i bits = _mm512_castps_si512(x);
  const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xFFFF0000u));
  const __m512i rounded =
      _mm512_and_si512(_mm512_add_epi32(bits, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF))), high);
  const __mmask16 is_nan =
      _mm512_cmpgt_epi32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
  const __m512i quiet_nan = _mm512_ternarylogic_epi32(bits, high, _mm512_set1_epi32(0x00400000), 0xEA);  // (a & b) | c
  return _mm512_castsi512_ps(_mm512_mask_mov_epi32(rounded, is_nan, quiet_nan));
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
    decode64_lane_order(_mm512_permutexvar_epi8(order_, codes), out_lo, out_hi);
  }

  // The same without the initial permutation: for codes already stored in the lane order above
  // (the packed GEMV weights), out_lo / out_hi hold the lane-interleaved BF16 results.
  inline void decode64_lane_order(__m512i c, __m512i* out_lo, __m512i* out_hi) const {
    // An empty asm that pins `c` to a register: without it GCC 12 spills the codes and reloads
    // them once per use (the lookups read them as bytes, the sign merge as dwords), which cost
    // the AMX FP8 GEMV about 8 %.
    __asm__("" : "+v"(c));
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
