// AVX2 quantizer inner loops; bit-identical to quantize_portable.cc. Each lane performs the
// portable loop's operations on its element (widen, multiply, encode / decode, multiply, round)
// with the exact codecs of avx2_codec_inl.h; the amax is an unsigned maximum of bit patterns, so
// its order does not matter.
#include <cstdint>
#include <cstring>

#include "numerics/bf16.h"
#include "numerics/quantize_kernels.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "numerics/avx2_codec_inl.h"

namespace fp8rl::detail {
namespace {

using avx2::first_lanes_mask;

// 8 source values as FP32.
inline __m256 load8(const float* x) { return _mm256_loadu_ps(x); }
inline __m256 load8(const bf16_t* x) {
  return avx2::bf16_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x)));
}
// The first `count` (1..7) source values; the other lanes read as +0 (which never changes an amax).
inline __m256 load_part(const float* x, int64_t count) { return _mm256_maskload_ps(x, first_lanes_mask(count)); }
inline __m256 load_part(const bf16_t* x, int64_t count) {
  alignas(16) uint16_t h[8] = {};
  std::memcpy(h, x, static_cast<size_t>(count) * 2);
  return avx2::bf16_decode8(_mm_load_si128(reinterpret_cast<const __m128i*>(h)));
}

inline void store8(float* out, __m256 v) { _mm256_storeu_ps(out, v); }
inline void store8(bf16_t* out, __m256 v) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), avx2::bf16_encode8(v)); }
inline void store_part(float* out, __m256 v, int64_t count) { _mm256_maskstore_ps(out, first_lanes_mask(count), v); }
inline void store_part(bf16_t* out, __m256 v, int64_t count) {
  alignas(16) uint16_t h[8];
  _mm_store_si128(reinterpret_cast<__m128i*>(h), avx2::bf16_encode8(v));
  std::memcpy(out, h, static_cast<size_t>(count) * 2);
}

// 8 codes (n = 8) or the first n < 8 of them, as exact FP32 values.
inline __m256 decode_codes(const uint8_t* q, int64_t n) {
  if (n >= 8) return avx2::e4m3_decode8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  uint64_t codes = 0;
  std::memcpy(&codes, q, static_cast<size_t>(n));
  return avx2::e4m3_decode8(_mm_cvtsi64_si128(static_cast<long long>(codes)));
}

// 32 values -> 32 E4M3 codes in element order.
inline __m256i e4m3_encode32(__m256 a, __m256 b, __m256 c, __m256 d) {
  // The packs work within 128-bit halves: bytes come out as dwords a0-3 b0-3 c0-3 d0-3 | a4-7 ...;
  // the permutation restores element order. (Lanes are 0..0xFF, so the unsigned packs are exact.)
  const __m256i ab = _mm256_packus_epi32(avx2::e4m3_encode8_lanes(a), avx2::e4m3_encode8_lanes(b));
  const __m256i cd = _mm256_packus_epi32(avx2::e4m3_encode8_lanes(c), avx2::e4m3_encode8_lanes(d));
  return _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// The codes of the first min(n, 8) lanes of v.
inline void store_codes(uint8_t* out, __m256 v, int64_t n) {
  const __m128i codes = avx2::e4m3_encode8(v);
  if (n >= 8) {
    _mm_storel_epi64(reinterpret_cast<__m128i*>(out), codes);
  } else {
    const uint64_t bytes = static_cast<uint64_t>(_mm_cvtsi128_si64(codes));
    std::memcpy(out, &bytes, static_cast<size_t>(n));
  }
}

// The unsigned maximum of the 8 lanes.
inline uint32_t reduce_max(__m256i v) {
  __m128i h = _mm_max_epu32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0x4E));
  h = _mm_max_epu32(h, _mm_shuffle_epi32(h, 0xB1));
  return static_cast<uint32_t>(_mm_cvtsi128_si32(h));
}

template <typename T>
void amax_bits_blocks(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* amax) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t c0 = 0, b = 0; c0 < cols; c0 += 128, ++b) {
    const int64_t n = cols - c0 < 128 ? cols - c0 : 128;
    // Four accumulators (independent max chains), one horizontal reduction per block.
    __m256i acc[4];
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_setzero_si256();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * ld + c0;
      int64_t i = 0;
      if (n == 128) {
        for (; i < 128; i += 32)
          for (int j = 0; j < 4; ++j) acc[j] = _mm256_max_epu32(acc[j], avx2::abs_bits8(load8(row + i + 8 * j)));
      } else {
        for (; i + 8 <= n; i += 8) acc[0] = _mm256_max_epu32(acc[0], avx2::abs_bits8(load8(row + i)));
        if (i < n) acc[1] = _mm256_max_epu32(acc[1], avx2::abs_bits8(load_part(row + i, n - i)));
      }
    }
    const uint32_t block_max = reduce_max(
        _mm256_max_epu32(_mm256_max_epu32(acc[0], acc[1]), _mm256_max_epu32(acc[2], acc[3])));
    amax[b] = amax[b] > block_max ? amax[b] : block_max;
  }
}

template <typename T>
void amax_bits_accumulate(const void* xv, int64_t n, uint32_t* acc) {
  const T* x = static_cast<const T*>(xv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256i* a = reinterpret_cast<__m256i*>(acc + i);
    _mm256_storeu_si256(a, _mm256_max_epu32(_mm256_loadu_si256(a), avx2::abs_bits8(load8(x + i))));
  }
  if (i < n) {
    const __m256i m = first_lanes_mask(n - i);
    int* a = reinterpret_cast<int*>(acc + i);
    _mm256_maskstore_epi32(a, m,
                           _mm256_max_epu32(_mm256_maskload_epi32(a, m), avx2::abs_bits8(load_part(x + i, n - i))));
  }
}

template <typename T>
void scale_encode_blocks(const void* xv, int64_t n, const float* qs, uint8_t* out, bool streaming) {
  const T* x = static_cast<const T*>(xv);
  // Non-temporal stores skip the read-for-ownership of each output line; they need 32-byte
  // aligned addresses (others take a plain store: the same bytes).
  const auto store32 = [streaming](uint8_t* dst, __m256i codes) {
    if (streaming && (reinterpret_cast<uintptr_t>(dst) & 31) == 0)
      _mm256_stream_si256(reinterpret_cast<__m256i*>(dst), codes);
    else
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), codes);
  };
  for (int64_t b0 = 0; b0 < n; b0 += 128) {
    const __m256 q = _mm256_set1_ps(qs[b0 / 128]);
    const int64_t end = n - b0 < 128 ? n : b0 + 128;
    int64_t i = b0;
    for (; i + 32 <= end; i += 32)
      store32(out + i, e4m3_encode32(_mm256_mul_ps(load8(x + i), q), _mm256_mul_ps(load8(x + i + 8), q),
                                     _mm256_mul_ps(load8(x + i + 16), q), _mm256_mul_ps(load8(x + i + 24), q)));
    for (; i < end; i += 8) {
      const __m256 v = end - i >= 8 ? load8(x + i) : load_part(x + i, end - i);
      store_codes(out + i, _mm256_mul_ps(v, q), end - i);
    }
  }
}

template <typename T>
void scale_encode_each(const void* xv, int64_t n, const float* qs, uint8_t* out) {
  const T* x = static_cast<const T*>(xv);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256 v[4];
    for (int j = 0; j < 4; ++j) v[j] = _mm256_mul_ps(load8(x + i + 8 * j), _mm256_loadu_ps(qs + i + 8 * j));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), e4m3_encode32(v[0], v[1], v[2], v[3]));
  }
  for (; i < n; i += 8) {
    const bool full = n - i >= 8;
    const __m256 v = full ? _mm256_mul_ps(load8(x + i), _mm256_loadu_ps(qs + i))
                          : _mm256_mul_ps(load_part(x + i, n - i), load_part(qs + i, n - i));
    store_codes(out + i, v, n - i);
  }
}

template <typename T>
void amax_bits_rows_and_cols(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* col_amax,
                             uint32_t* row_amax, int64_t row_ld) {
  const T* x = static_cast<const T*>(xv);
  // 64 columns at a time: their maxima in 8 registers over the rows (with the row's maximum and
  // the abs mask, 10 of the 16), each row's half-block maximum reduced once.
  for (int64_t c0 = 0; c0 < cols; c0 += 64) {
    const int64_t n = cols - c0 < 64 ? cols - c0 : 64;
    const int64_t b = c0 / 128;
    __m256i col[8];
    for (int j = 0; j < 8; ++j) {
      const int64_t left = n - 8 * j;
      col[j] = left >= 8  ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(col_amax + c0 + 8 * j))
               : left > 0 ? _mm256_maskload_epi32(reinterpret_cast<const int*>(col_amax + c0 + 8 * j),
                                                  first_lanes_mask(left))
                          : _mm256_setzero_si256();
    }
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * ld + c0;
      __m256i t = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const int64_t left = n - 8 * j;
        if (left <= 0) break;
        const __m256i a = avx2::abs_bits8(left >= 8 ? load8(row + 8 * j) : load_part(row + 8 * j, left));
        col[j] = _mm256_max_epu32(col[j], a);
        t = _mm256_max_epu32(t, a);
      }
      const uint32_t half_max = reduce_max(t);
      uint32_t& out = row_amax[r * row_ld + b];
      out = out > half_max ? out : half_max;
    }
    for (int j = 0; j < 8; ++j) {
      const int64_t left = n - 8 * j;
      if (left >= 8) {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(col_amax + c0 + 8 * j), col[j]);
      } else if (left > 0) {
        _mm256_maskstore_epi32(reinterpret_cast<int*>(col_amax + c0 + 8 * j), first_lanes_mask(left), col[j]);
      }
    }
  }
}

template <typename T>
void scale_encode_blocks_and_each(const void* xv, int64_t n, const float* qs, uint8_t* out, const float* qs_each,
                                  uint8_t* out_each) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t b0 = 0; b0 < n; b0 += 128) {
    const __m256 q = _mm256_set1_ps(qs[b0 / 128]);
    const int64_t end = n - b0 < 128 ? n : b0 + 128;
    int64_t i = b0;
    for (; i + 32 <= end; i += 32) {
      __m256 v[4], blocks[4], each[4];
      for (int j = 0; j < 4; ++j) {
        v[j] = load8(x + i + 8 * j);
        blocks[j] = _mm256_mul_ps(v[j], q);
        each[j] = _mm256_mul_ps(v[j], _mm256_loadu_ps(qs_each + i + 8 * j));
      }
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), e4m3_encode32(blocks[0], blocks[1], blocks[2], blocks[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out_each + i), e4m3_encode32(each[0], each[1], each[2], each[3]));
    }
    for (; i < end; i += 8) {
      const bool full = end - i >= 8;
      const __m256 v = full ? load8(x + i) : load_part(x + i, end - i);
      store_codes(out + i, _mm256_mul_ps(v, q), end - i);
      store_codes(out_each + i, _mm256_mul_ps(v, full ? _mm256_loadu_ps(qs_each + i) : load_part(qs_each + i, end - i)),
                  end - i);
    }
  }
}

template <typename T>
void decode_scale(const uint8_t* q, int64_t n, float s, void* outv) {
  T* out = static_cast<T*>(outv);
  const __m256 sv = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, _mm256_mul_ps(decode_codes(q + i, 8), sv));
  if (i < n) store_part(out + i, _mm256_mul_ps(decode_codes(q + i, n - i), sv), n - i);
}

template <typename T>
void decode_scale_each(const uint8_t* q, int64_t n, const float* s, void* outv) {
  T* out = static_cast<T*>(outv);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) store8(out + i, _mm256_mul_ps(decode_codes(q + i, 8), _mm256_loadu_ps(s + i)));
  if (i < n) store_part(out + i, _mm256_mul_ps(decode_codes(q + i, n - i), load_part(s + i, n - i)), n - i);
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

const QuantizeKernels& quantize_kernels_avx2() {
  static constexpr QuantizeKernels kernels = {source_kernels<float>(), source_kernels<bf16_t>(), dest_kernels<float>(),
                                              dest_kernels<bf16_t>()};
  return kernels;
}

}  // namespace fp8rl::detail
FP8RL_AVX2_END
