// AVX-512 building blocks of the attention row kernels (attention_row_avx512.cc for fp32,
// attention_row_bf16_avx512.cc for bf16): masks, prefetching, the softmax and the 16-key
// reduction tree, each in the scalar template's order (attention_row.h).
//
// Include this only inside an FP8RL_AVX512_BEGIN ... FP8RL_AVX512_END region of a kernel file (see
// simd_target.h); it includes the AVX-512 codec and exp headers it builds on.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/attention/attention_row.h"
#include "numerics/avx512_codec_inl.h"
#include "numerics/avx512_exp_inl.h"

namespace fp8rl::detail {
namespace {

// Lanes of elements [16 c, 16 c + 16) below D.
inline __mmask16 chunk_mask(int64_t D, int64_t c) {
  const int64_t left = D - 16 * c;
  return left >= 16 ? __mmask16(0xFFFF) : left <= 0 ? __mmask16(0) : static_cast<__mmask16>((1u << left) - 1);
}

// Requests the first min(n, 16) rows of a run (their D elements) into L2 ahead of their use: a
// long context's rows come from DRAM page by page (16 positions per KV page), where the hardware
// prefetchers do not run ahead across pages.
template <int64_t kBytes>
inline void prefetch_rows(const void* first, int64_t n, int64_t row_bytes, int64_t D) {
  const auto* p = static_cast<const char*>(first);
  for (int64_t r = 0; r < std::min<int64_t>(n, 16); ++r)
    for (int64_t b = 0; b < D * kBytes; b += 64) _mm_prefetch(p + r * row_bytes + b, _MM_HINT_T1);
}

// attention_softmax(p, len, max of p) 16 positions at a time: lane l sums the exps of positions
// l, l + 16, ... in order, as the template's lanes do.
inline void softmax(float* p, int64_t len) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 k = chunk_mask(len, j / 16);
    m = _mm512_mask_max_ps(m, k, _mm512_maskz_loadu_ps(k, p + j), m);  // NaN ignored, as std::max
  }
  const __m512 max = _mm512_set1_ps(_mm512_reduce_max_ps(m));
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 k = chunk_mask(len, j / 16);
    const __m512 e = avx512::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, p + j), max));
    _mm512_mask_storeu_ps(p + j, k, e);
    sum = _mm512_mask_add_ps(sum, k, sum, e);
  }
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  const __m512 inv = _mm512_set1_ps(1.0f / attention_tree_sum(lanes));
  for (int64_t j = 0; j < len; j += 16) {
    const __mmask16 k = chunk_mask(len, j / 16);
    _mm512_mask_storeu_ps(p + j, k, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, p + j), inv));
  }
}

// s[i] = tree(a[i]) for 16 accumulators: lanes[l] += lanes[l + w] for w = 8, 4, 2, 1, lane 0
// returned; the four steps pair the same lanes as reduce-one-at-a-time would.
inline __m512 reduce_tree16(const __m512* a) {
  __m512 c[8], d[4], g[2];
  for (int i = 0; i < 8; ++i)  // 8-lane halves: [a_2i | a_2i+1]
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // 128-bit lane L: key 4i + L
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)  // lane L: elements 0,1 key 8i + L, elements 2,3 key 8i + 4 + L
    g[i] =
        _mm512_add_ps(_mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0x44), _mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0xEE));
  // Element 4L + e holds key 4e + L; the permutation (its own inverse) puts key i at element i.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), s);
}

// fn(std::integral_constant<int, min(left, 4)>): a chunk or query count of a pass as a constant.
template <typename Fn>
inline void with_count_up_to_4(int64_t left, const Fn& fn) {
  if (left >= 4) return fn(std::integral_constant<int, 4>{});
  if (left == 3) return fn(std::integral_constant<int, 3>{});
  if (left == 2) return fn(std::integral_constant<int, 2>{});
  fn(std::integral_constant<int, 1>{});
}

}  // namespace
}  // namespace fp8rl::detail
