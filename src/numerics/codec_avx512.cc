// AVX-512 array codecs. Bit-identical to the scalar codec; see avx512_codec_inl.h.
#include <cstdint>

#include "numerics/codec.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"

namespace fp8rl::detail {

using avx512::first_bytes_mask;

void e4m3_encode_f32_avx512(const float* in, uint8_t* out, int64_t n) {
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    _mm512_storeu_si512(out + i, avx512::e4m3_encode64(_mm512_loadu_ps(in + i), _mm512_loadu_ps(in + i + 16),
                                                       _mm512_loadu_ps(in + i + 32), _mm512_loadu_ps(in + i + 48)));
  }
  for (; i < n; i += 16) {
    const int64_t left = n - i < 16 ? n - i : 16;
    const __mmask16 m = static_cast<__mmask16>(first_bytes_mask(left));
    const __m128i codes = avx512::e4m3_encode16(_mm512_maskz_loadu_ps(m, in + i));
    _mm_mask_storeu_epi8(out + i, m, codes);
  }
}

void e4m3_decode_bf16_avx512(const uint8_t* in, bf16_t* out, int64_t n) {
  const avx512::E4m3Decoder decoder;
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t left = n - i;
    __m512i lo, hi;
    if (left >= 64) {
      decoder.decode64(_mm512_loadu_si512(in + i), &lo, &hi);
      _mm512_storeu_si512(out + i, lo);
      _mm512_storeu_si512(out + i + 32, hi);
    } else {
      decoder.decode64(_mm512_maskz_loadu_epi8(first_bytes_mask(left), in + i), &lo, &hi);
      const __mmask32 m_lo = static_cast<__mmask32>(first_bytes_mask(left));
      const __mmask32 m_hi = static_cast<__mmask32>(left > 32 ? first_bytes_mask(left - 32) : 0);
      _mm512_mask_storeu_epi16(out + i, m_lo, lo);
      _mm512_mask_storeu_epi16(out + i + 32, m_hi, hi);
    }
  }
}

void e4m3_decode_f32_avx512(const uint8_t* in, float* out, int64_t n) {
  const avx512::E4m3Decoder decoder;
  for (int64_t i = 0; i < n; i += 64) {
    const int64_t left = n - i;
    __m512i words[2];
    decoder.decode64(_mm512_maskz_loadu_epi8(first_bytes_mask(left), in + i), &words[0], &words[1]);
    for (int q = 0; q < 4; ++q) {
      const __m256i h = q % 2 == 0 ? _mm512_castsi512_si256(words[q / 2]) : _mm512_extracti64x4_epi64(words[q / 2], 1);
      const __m512 f = avx512::bf16_decode16(h);
      const int64_t at = 16 * q;
      if (left >= at + 16) {
        _mm512_storeu_ps(out + i + at, f);
      } else if (left > at) {
        _mm512_mask_storeu_ps(out + i + at, static_cast<__mmask16>(first_bytes_mask(left - at)), f);
      }
    }
  }
}

void bf16_encode_f32_avx512(const float* in, bf16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i;
    if (left >= 16) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), avx512::bf16_encode16(_mm512_loadu_ps(in + i)));
    } else {
      const __mmask16 m = static_cast<__mmask16>(first_bytes_mask(left));
      _mm256_mask_storeu_epi16(out + i, m, avx512::bf16_encode16(_mm512_maskz_loadu_ps(m, in + i)));
    }
  }
}

void bf16_decode_f32_avx512(const bf16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t left = n - i;
    if (left >= 16) {
      _mm512_storeu_ps(out + i, avx512::bf16_decode16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
    } else {
      const __mmask16 m = static_cast<__mmask16>(first_bytes_mask(left));
      _mm512_mask_storeu_ps(out + i, m, avx512::bf16_decode16(_mm256_maskz_loadu_epi16(m, in + i)));
    }
  }
}

void bf16_round_f32_avx512(float* x, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = static_cast<__mmask16>(first_bytes_mask(n - i));
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(x + i, m, avx512::bf16_round16(v));
  }
}

}  // namespace fp8rl::detail
FP8RL_AVX512_END
