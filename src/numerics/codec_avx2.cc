// AVX2 array codecs. Bit-identical to the scalar codec; see avx2_codec_inl.h.
#include <cstdint>
#include <cstring>

#include "numerics/codec.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "numerics/avx2_codec_inl.h"

namespace fp8rl::detail {
namespace {

// Runs `body(in_offset, count)` over [0, n) in steps of 8; a tail of fewer than 8 elements goes
// through `tail` with the count, so no step reads or writes past the arrays.
template <typename Body, typename Tail>
inline void in_steps_of_8(int64_t n, Body body, Tail tail) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) body(i);
  if (i < n) tail(i, n - i);
}

}  // namespace

void e4m3_encode_f32_avx2(const float* in, uint8_t* out, int64_t n) {
  in_steps_of_8(
      n, [&](int64_t i) { _mm_storel_epi64(reinterpret_cast<__m128i*>(out + i), avx2::e4m3_encode8(_mm256_loadu_ps(in + i))); },
      [&](int64_t i, int64_t left) {
        const __m128i codes = avx2::e4m3_encode8(_mm256_maskload_ps(in + i, avx2::first_lanes_mask(left)));
        uint8_t bytes[16];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(bytes), codes);
        std::memcpy(out + i, bytes, static_cast<size_t>(left));
      });
}

void e4m3_decode_f32_avx2(const uint8_t* in, float* out, int64_t n) {
  in_steps_of_8(
      n, [&](int64_t i) { _mm256_storeu_ps(out + i, avx2::e4m3_decode8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)))); },
      [&](int64_t i, int64_t left) {
        uint8_t bytes[16] = {};
        std::memcpy(bytes, in + i, static_cast<size_t>(left));
        const __m256 v = avx2::e4m3_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
        _mm256_maskstore_ps(out + i, avx2::first_lanes_mask(left), v);
      });
}

void e4m3_decode_bf16_avx2(const uint8_t* in, bf16_t* out, int64_t n) {
  // E4M3 values are exact in BF16: the decoded FP32 patterns' high halves.
  in_steps_of_8(
      n,
      [&](int64_t i) {
        const __m256 v = avx2::e4m3_decode8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(in + i)));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), avx2::bf16_encode8(v));
      },
      [&](int64_t i, int64_t left) {
        uint8_t bytes[16] = {};
        std::memcpy(bytes, in + i, static_cast<size_t>(left));
        const __m256 v = avx2::e4m3_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes)));
        bf16_t h[8];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h), avx2::bf16_encode8(v));
        std::memcpy(out + i, h, static_cast<size_t>(left) * sizeof(bf16_t));
      });
}

void bf16_encode_f32_avx2(const float* in, bf16_t* out, int64_t n) {
  in_steps_of_8(
      n, [&](int64_t i) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), avx2::bf16_encode8(_mm256_loadu_ps(in + i))); },
      [&](int64_t i, int64_t left) {
        bf16_t h[8];
        _mm_storeu_si128(reinterpret_cast<__m128i*>(h),
                         avx2::bf16_encode8(_mm256_maskload_ps(in + i, avx2::first_lanes_mask(left))));
        std::memcpy(out + i, h, static_cast<size_t>(left) * sizeof(bf16_t));
      });
}

void bf16_decode_f32_avx2(const bf16_t* in, float* out, int64_t n) {
  in_steps_of_8(
      n, [&](int64_t i) { _mm256_storeu_ps(out + i, avx2::bf16_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i)))); },
      [&](int64_t i, int64_t left) {
        bf16_t h[8] = {};
        std::memcpy(h, in + i, static_cast<size_t>(left) * sizeof(bf16_t));
        const __m256 v = avx2::bf16_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
        _mm256_maskstore_ps(out + i, avx2::first_lanes_mask(left), v);
      });
}

void bf16_round_f32_avx2(float* x, int64_t n) {
  in_steps_of_8(
      n, [&](int64_t i) { _mm256_storeu_ps(x + i, avx2::bf16_round8(_mm256_loadu_ps(x + i))); },
      [&](int64_t i, int64_t left) {
        const __m256i m = avx2::first_lanes_mask(left);
        _mm256_maskstore_ps(x + i, m, avx2::bf16_round8(_mm256_maskload_ps(x + i, m)));
      });
}

}  // namespace fp8rl::detail
FP8RL_AVX2_END
