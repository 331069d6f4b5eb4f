// AVX-512 quantizer inner loops; bit-identical to quantize_portable.cc.
#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/quantize_kernels.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"

namespace fp8rl::detail {
namespace {

using avx512::first_bytes_mask;

inline __mmask16 mask16(int64_t left) { return static_cast<__mmask16>(first_bytes_mask(left)); }

// 16 source values as FP32; masked-off lanes read as +0 (which never changes an amax).
inline __m512 load16(const float* x) { return _mm512_loadu_ps(x); }
inline __m512 load16(const bf16_t* x) {
  return avx512::bf16_decode16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x)));
}
inline __m512 load16(const float* x, __mmask16 m) { return _mm512_maskz_loadu_ps(m, x); }
inline __m512 load16(const bf16_t* x, __mmask16 m) { return avx512::bf16_decode16(_mm256_maskz_loadu_epi16(m, x)); }

inline void store16(float* out, __m512 v) { _mm512_storeu_ps(out, v); }
inline void store16(bf16_t* out, __m512 v) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), avx512::bf16_encode16(v));
}
inline void store16(float* out, __m512 v, __mmask16 m) { _mm512_mask_storeu_ps(out, m, v); }
inline void store16(bf16_t* out, __m512 v, __mmask16 m) { _mm256_mask_storeu_epi16(out, m, avx512::bf16_encode16(v)); }

// The lane-wise unsigned maximum of 8 vectors, as a tree.
inline __m512i max8(const __m512i (&v)[8]) {
  return _mm512_max_epu32(_mm512_max_epu32(_mm512_max_epu32(v[0], v[1]), _mm512_max_epu32(v[2], v[3])),
                          _mm512_max_epu32(_mm512_max_epu32(v[4], v[5]), _mm512_max_epu32(v[6], v[7])));
}

template <typename T>
void amax_bits_blocks(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* amax) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += 128, ++b) {
    const int64_t n = cols - c0 < 128 ? cols - c0 : 128;
    // One accumulator per 16 columns of the block; a single horizontal reduction at the end.
    __m512i acc[8];
    for (int j = 0; j < 8; ++j) acc[j] = _mm512_setzero_si512();
    if (n == 128) {
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * ld + c0;
        for (int j = 0; j < 8; ++j) acc[j] = _mm512_max_epu32(acc[j], avx512::abs_bits16(load16(row + 16 * j)));
      }
    } else {
      for (int64_t r = 0; r < rows; ++r) {
        const T* row = x + r * ld + c0;
        for (int64_t j = 0; 16 * j < n; ++j)
          acc[j] = _mm512_max_epu32(acc[j], avx512::abs_bits16(load16(row + 16 * j, mask16(n - 16 * j))));
      }
    }
    const uint32_t block_max = _mm512_reduce_max_epu32(max8(acc));
    amax[b] = amax[b] > block_max ? amax[b] : block_max;
  }
}

template <typename T>
void amax_bits_accumulate(const void* xv, int64_t n, uint32_t* acc) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512i a = _mm512_maskz_loadu_epi32(m, acc + i);
    _mm512_mask_storeu_epi32(acc + i, m, _mm512_max_epu32(a, avx512::abs_bits16(load16(x + i, m))));
  }
}

template <typename T>
void scale_encode_blocks(const void* xv, int64_t n, const float* qs, uint8_t* out, bool streaming) {
  const T* x = static_cast<const T*>(xv);
  // Non-temporal stores skip the read-for-ownership of each output line (a quarter of the input
  // bytes again in memory traffic); they need 64-byte aligned addresses.
  const auto store64 = [streaming](uint8_t* dst, __m512i codes) {
    if (streaming && (reinterpret_cast<uintptr_t>(dst) & 63) == 0)
      _mm512_stream_si512(reinterpret_cast<__m512i*>(dst), codes);
    else
      _mm512_storeu_si512(dst, codes);
  };
  for (int64_t b0 = 0; b0 < n; b0 += 128) {
    const __m512 q = _mm512_set1_ps(qs[b0 / 128]);
    const int64_t end = n - b0 < 128 ? n : b0 + 128;
    int64_t i = b0;
    for (; i + 64 <= end; i += 64) {
      store64(out + i, avx512::e4m3_encode64(_mm512_mul_ps(load16(x + i), q), _mm512_mul_ps(load16(x + i + 16), q),
                                                         _mm512_mul_ps(load16(x + i + 32), q),
                                                         _mm512_mul_ps(load16(x + i + 48), q)));
    }
    for (; i < end; i += 16) {
      const __mmask16 m = mask16(end - i);
      _mm_mask_storeu_epi8(out + i, m, avx512::e4m3_encode16(_mm512_mul_ps(load16(x + i, m), q)));
    }
  }
}

template <typename T>
void scale_encode_each(const void* xv, int64_t n, const float* qs, uint8_t* out) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = mask16(n - i);
    const __m512 v = _mm512_mul_ps(load16(x + i, m), _mm512_maskz_loadu_ps(m, qs + i));
    _mm_mask_storeu_epi8(out + i, m, avx512::e4m3_encode16(v));
  }
}

template <typename T>
void amax_bits_rows_and_cols(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* col_amax,
                             uint32_t* row_amax, int64_t row_ld) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += 128, ++b) {
    // The block's 128 column maxima stay in registers over the rows; each row's block maximum is
    // its 8 vectors' maximum, reduced once.
    const int64_t n = cols - c0 < 128 ? cols - c0 : 128;
    __mmask16 m[8];
    __m512i col[8];
    for (int j = 0; j < 8; ++j) {
      m[j] = 16 * j < n ? mask16(n - 16 * j) : 0;
      col[j] = _mm512_maskz_loadu_epi32(m[j], col_amax + c0 + 16 * j);
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * ld + c0;
      __m512i a[8];
      for (int j = 0; j < 8; ++j) {
        a[j] = avx512::abs_bits16(n == 128 ? load16(row + 16 * j) : load16(row + 16 * j, m[j]));
        col[j] = _mm512_max_epu32(col[j], a[j]);
      }
      const uint32_t block_max = _mm512_reduce_max_epu32(max8(a));
      uint32_t& out = row_amax[r * row_ld + b];
      out = out > block_max ? out : block_max;
    }
    for (int j = 0; j < 8; ++j) _mm512_mask_storeu_epi32(col_amax + c0 + 16 * j, m[j], col[j]);
  }
}

template <typename T>
void scale_encode_blocks_and_each(const void* xv, int64_t n, const float* qs, uint8_t* out, const float* qs_each,
                                  uint8_t* out_each) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t b0 = 0; b0 < n; b0 += 128) {
    const __m512 q = _mm512_set1_ps(qs[b0 / 128]);
    const int64_t end = n - b0 < 128 ? n : b0 + 128;
    int64_t i = b0;
    for (; i + 64 <= end; i += 64) {
      __m512 v[4], blocks[4], each[4];
      for (int j = 0; j < 4; ++j) {
        v[j] = load16(x + i + 16 * j);
        blocks[j] = _mm512_mul_ps(v[j], q);
        each[j] = _mm512_mul_ps(v[j], _mm512_loadu_ps(qs_each + i + 16 * j));
      }
      _mm512_storeu_si512(out + i, avx512::e4m3_encode64(blocks[0], blocks[1], blocks[2], blocks[3]));
      _mm512_storeu_si512(out_each + i, avx512::e4m3_encode64(each[0], each[1], each[2], each[3]));
    }
    for (; i < end; i += 16) {
      const __mmask16 m = mask16(end - i);
      const __m512 v = load16(x + i, m);
      _mm_mask_storeu_epi8(out + i, m, avx512::e4m3_encode16(_mm512_mul_ps(v, q)));
      _mm_mask_storeu_epi8(out_each + i, m,
                           avx512::e4m3_encode16(_mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, qs_each + i))));
    }
  }
}

// Decodes 64 codes at a time and hands each group of 16 FP32 values to `emit(offset, values)`.
template <typename Emit>
inline void decode_groups(const uint8_t* q, int64_t n, Emit emit) {
  const avx512::E4m3Decoder decoder;
  for (int64_t i = 0; i < n; i += 64) {
    __m512i words[2];
    decoder.decode64(_mm512_maskz_loadu_epi8(first_bytes_mask(n - i), q + i), &words[0], &words[1]);
    for (int g = 0; g < 4 && i + 16 * g < n; ++g) {
      const __m256i h = g % 2 == 0 ? _mm512_castsi512_si256(words[g / 2]) : _mm512_extracti64x4_epi64(words[g / 2], 1);
      emit(i + 16 * g, avx512::bf16_decode16(h));
    }
  }
}

template <typename T>
void decode_scale(const uint8_t* q, int64_t n, float s, void* outv) {
  T* out = static_cast<T*>(outv);
  const __m512 sv = _mm512_set1_ps(s);
  decode_groups(q, n, [&](int64_t at, __m512 v) {
    if (n - at >= 16) {
      store16(out + at, _mm512_mul_ps(v, sv));
    } else {
      store16(out + at, _mm512_mul_ps(v, sv), mask16(n - at));
    }
  });
}

template <typename T>
void decode_scale_each(const uint8_t* q, int64_t n, const float* s, void* outv) {
  T* out = static_cast<T*>(outv);
  decode_groups(q, n, [&](int64_t at, __m512 v) {
    const __mmask16 m = mask16(n - at);
    store16(out + at, _mm512_mul_ps(v, _mm512_maskz_loadu_ps(m, s + at)), m);
  });
}

template <typename T>
constexpr SourceKernels source_kernels() {
  return {amax_bits_blocks<T>,        amax_bits_accumulate<T>,    scale_encode_blocks<T>,
          scale_encode_each<T>,       amax_bits_rows_and_cols<T>, scale_encode_blocks_and_each<T>};
}
template <typename T>
constexpr DestKernels dest_kernels() {
  return {decode_scale<T>, decode_scale_each<T>};
}

}  // namespace

const QuantizeKernels& quantize_kernels_avx512() {
  static constexpr QuantizeKernels kernels = {source_kernels<float>(), source_kernels<bf16_t>(),
                                              dest_kernels<float>(), dest_kernels<bf16_t>()};
  return kernels;
}

}  // namespace fp8rl::detail
FP8RL_AVX512_END
