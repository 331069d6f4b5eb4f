// AVX2 building blocks of the attention row kernels (attention_row_avx2.cc for fp32,
// attention_row_bf16_avx2.cc for bf16): row loads, prefetching, the softmax and the scoring of
// 8 keys with the template's reduction tree (attention_row.h).
//
// Include this only inside an FP8RL_AVX2_BEGIN ... FP8RL_AVX2_END region of a kernel file (see
// simd_target.h); it includes the AVX2 codec and exp headers it builds on.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/attention/attention_row.h"
#include "numerics/avx2_codec_inl.h"
#include "numerics/avx2_exp_inl.h"

namespace fp8rl::detail {
namespace {

// Elements [8 c, 8 c + 8) of a row as exact FP32; lanes past D are +0 (and nothing past D is read).
template <DType E>
[[gnu::always_inline]] inline __m256 load_chunk(const uint8_t* row, int64_t c, int64_t D) {
  const int64_t left = D - 8 * c;
  if constexpr (E == DType::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + 8 * c;
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, avx2::first_lanes_mask(left));
  } else {
    constexpr int64_t kBytes = dtype_bytes(E);
    const uint8_t* p = row + 8 * c * kBytes;
    __m128i raw;
    if (left >= 8) {
      raw = kBytes == 2 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                        : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    } else {  // zero bytes decode to +0 in both formats
      alignas(16) uint8_t buf[16] = {};
      std::memcpy(buf, p, static_cast<size_t>(left * kBytes));
      raw = _mm_load_si128(reinterpret_cast<const __m128i*>(buf));
    }
    return E == DType::kBF16 ? avx2::bf16_decode8(raw) : avx2::e4m3_decode8(raw);
  }
}

// Requests bytes [begin, end) of the first min(n, 16) rows of a run into L2 ahead of their use
// (KV pages of 16 positions come from DRAM page by page, where the hardware prefetchers do not
// run ahead across pages).
inline void prefetch_rows(const void* first, int64_t n, int64_t row_bytes, int64_t begin, int64_t end) {
  const auto* p = static_cast<const char*>(first);
  for (int64_t r = 0; r < std::min<int64_t>(n, 16); ++r) {
    const uintptr_t row = reinterpret_cast<uintptr_t>(p + r * row_bytes);
    for (uintptr_t line = (row + begin) & ~uintptr_t{63}; line < row + end; line += 64)  // every line touched
      _mm_prefetch(reinterpret_cast<const char*>(line), _MM_HINT_T1);
  }
}

// attention_softmax(p, len, max of p): exp 8 positions at a time, position j summed into lane
// j % 16 (sum[0] holds lanes 0-7, sum[1] lanes 8-15) in order, as the template's lanes.
inline void softmax(float* p, int64_t len) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t j = 0;
  for (; j + 8 <= len; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(p + j), m);  // NaN ignored, as std::max
  if (j < len) {
    const __m256i k = avx2::first_lanes_mask(len - j);
    m = _mm256_max_ps(_mm256_blendv_ps(m, _mm256_maskload_ps(p + j, k), _mm256_castsi256_ps(k)), m);
  }
  // The maximum of the lanes (its order is immaterial: a +-0 max gives the same p - max).
  __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  h = _mm_max_ps(h, _mm_movehl_ps(h, h));
  h = _mm_max_ss(h, _mm_shuffle_ps(h, h, 1));
  const __m256 max = _mm256_set1_ps(_mm_cvtss_f32(h));
  __m256 sum[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (j = 0; j < len; j += 8) {
    const int half = static_cast<int>((j / 8) % 2);
    if (len - j >= 8) {
      const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(p + j), max));
      _mm256_storeu_ps(p + j, e);
      sum[half] = _mm256_add_ps(sum[half], e);
    } else {  // lanes past len add +0 (the sums are +0 or positive)
      const __m256i k = avx2::first_lanes_mask(len - j);
      const __m256 e = avx2::exp8(_mm256_sub_ps(_mm256_maskload_ps(p + j, k), max));
      _mm256_maskstore_ps(p + j, k, e);
      sum[half] = _mm256_add_ps(sum[half], _mm256_and_ps(e, _mm256_castsi256_ps(k)));
    }
  }
  alignas(32) float lanes[16];
  _mm256_store_ps(lanes, sum[0]);
  _mm256_store_ps(lanes + 8, sum[1]);
  const __m256 inv = _mm256_set1_ps(1.0f / attention_tree_sum(lanes));
  for (j = 0; j + 8 <= len; j += 8) _mm256_storeu_ps(p + j, _mm256_mul_ps(_mm256_loadu_ps(p + j), inv));
  if (j < len) {
    const __m256i k = avx2::first_lanes_mask(len - j);
    _mm256_maskstore_ps(p + j, k, _mm256_mul_ps(_mm256_maskload_ps(p + j, k), inv));
  }
}

// The 16 lanes of the dot products of q with N rows (row i at rows + i * ld) as lo[i] (lanes 0-7)
// and hi[i] (lanes 8-15), one FMA per element; D is padded to a multiple of 16 with zeros in q
// and the rows.
template <int N>
inline void lane_sums(const float* rows, int64_t ld, const float* q, int64_t padded, __m256* lo, __m256* hi) {
  for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < padded; c += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + c), q1 = _mm256_loadu_ps(q + c + 8);
    for (int i = 0; i < N; ++i) {
      lo[i] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(rows + i * ld + c), lo[i]);
      hi[i] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(rows + i * ld + c + 8), hi[i]);
    }
  }
}

// s[i] = lanes 0-7 + lanes 8-15 (the tree's w = 8 step) of lane_sums.
template <int N>
inline void score_rows(const float* rows, int64_t ld, const float* q, int64_t padded, __m256* s) {
  __m256 lo[N], hi[N];
  lane_sums<N>(rows, ld, q, padded, lo, hi);
  for (int i = 0; i < N; ++i) s[i] = _mm256_add_ps(lo[i], hi[i]);
}

// The w = 4, 2, 1 steps of the tree for 8 keys (s[i] holds key i's 8 lanes): element i of the
// result is key i's sum; each step adds the same lane pairs as the template's loop.
inline __m256 reduce_tree8(const __m256* s) {
  __m256 c[4], d[2];
  for (int i = 0; i < 4; ++i)  // lanes[l] += lanes[l + 4]: 128-bit half L is key 2i + L
    c[i] = _mm256_add_ps(_mm256_permute2f128_ps(s[2 * i], s[2 * i + 1], 0x20),
                         _mm256_permute2f128_ps(s[2 * i], s[2 * i + 1], 0x31));
  for (int i = 0; i < 2; ++i)  // lanes[l] += lanes[l + 2]: half L, elements 0-1 key 4i + L, 2-3 key 4i + 2 + L
    d[i] =
        _mm256_add_ps(_mm256_shuffle_ps(c[2 * i], c[2 * i + 1], 0x44), _mm256_shuffle_ps(c[2 * i], c[2 * i + 1], 0xEE));
  // lanes[0] += lanes[1]: element 4L + e holds key 2e + L; the permutation puts key i at element i.
  const __m256 e = _mm256_add_ps(_mm256_shuffle_ps(d[0], d[1], 0x88), _mm256_shuffle_ps(d[0], d[1], 0xDD));
  return _mm256_permutevar8x32_ps(e, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

// fn(std::integral_constant<int, min(left, Max)>) for left >= 1: a count as a constant.
template <int Max, typename Fn>
inline void with_count(int64_t left, const Fn& fn) {
  if constexpr (Max == 1) {
    fn(std::integral_constant<int, 1>{});
  } else {
    if (left >= Max) return fn(std::integral_constant<int, Max>{});
    with_count<Max - 1>(left, fn);
  }
}

// Scores of n <= 8 consecutive rows (padded FP32, row i at rows + i * ld) against q, times scale,
// written to probs[0, n). Rows past n are not read. Four keys at a time (8 accumulators).
inline void score_block8(const float* rows, int64_t ld, int64_t n, const float* q, int64_t padded, __m256 scale,
                         float* probs) {
  __m256 s[8];
  if (n == 8) {  // the common case, with the accumulators in registers
    score_rows<4>(rows, ld, q, padded, s);
    score_rows<4>(rows + 4 * ld, ld, q, padded, s + 4);
    _mm256_storeu_ps(probs, _mm256_mul_ps(reduce_tree8(s), scale));
    return;
  }
  for (int i = 0; i < 8; ++i) s[i] = _mm256_setzero_ps();
  for (int64_t i0 = 0; i0 < n; i0 += 4)
    with_count<4>(n - i0, [&](auto nr) { score_rows<nr>(rows + i0 * ld, ld, q, padded, s + i0); });
  _mm256_maskstore_ps(probs, avx2::first_lanes_mask(n), _mm256_mul_ps(reduce_tree8(s), scale));
}

// D padded to 16 (zeros past D): rows widened (or copied, for FP32 rows with D % 16 != 0).
template <DType E>
inline void widen_row(const uint8_t* row, int64_t D, int64_t padded, float* out) {
  for (int64_t c = 0; 8 * c < padded; ++c)
    _mm256_storeu_ps(out + 8 * c, 8 * c < D ? load_chunk<E>(row, c, D) : _mm256_setzero_ps());
}

// out[8 c0 .. 8 (c0 + NC)) of each of H queries from its accumulators, times value_scale (lanes
// past D not stored).
template <int H, int NC>
inline void store_outputs(const AttentionQuery* qs, const __m256 (&acc)[H][NC], int64_t D, int64_t c0,
                          float value_scale) {
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NC; ++c) {
      __m256 o = acc[h][c];
      if (value_scale != 1.0f) o = _mm256_mul_ps(o, _mm256_set1_ps(value_scale));
      float* dst = qs[h].out + 8 * (c0 + c);
      if (D - 8 * (c0 + c) >= 8)
        _mm256_storeu_ps(dst, o);
      else
        _mm256_maskstore_ps(dst, avx2::first_lanes_mask(D - 8 * (c0 + c)), o);
    }
}

}  // namespace
}  // namespace fp8rl::detail
