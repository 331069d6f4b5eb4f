// AVX2 attention_queries_kv over FP32, BF16 or E4M3 rows (attention_row.h), bit-identical to the
// scalar template. The template's 16 lanes are two ymm vectors, lanes 0-7 and 8-15:
//   score: lane l of a key's accumulator pair sums q[i] * k[i] for i = l, l + 16, ... in order
//          (one FMA per term; lanes past D add 0 * 0), then the template's tree: the w = 8 step
//          adds the two halves, the w = 4, 2, 1 steps run for 8 keys at once in a transposing
//          reduction that pairs the same lanes; times score_scale.
//   softmax: exp_f32 on 8 lanes (numerics/avx2_exp_inl.h); the sum keeps two vectors, lanes
//          0-7 and 8-15 of the template's 16 (position j in lane j % 16, in order), then its tree.
//   output: lane d sums p[j] * v_j[d] over j in order (one FMA per term), then * value_scale.
// Rows are widened (BF16) or decoded (E4M3) to exact FP32 as they are read. As in the AVX-512
// path, the queries share the pass: narrow key rows are widened once per block of 16 into a
// per-thread buffer and scored for every query there; value rows are widened once per pass and
// summed into up to four queries' accumulators.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <vector>

#include "kernels/attention_row.h"
#include "numerics/codec.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "numerics/avx2_codec_inl.h"  // inside the region by design (see that header)
#include "numerics/avx2_exp_inl.h"

namespace fp8rl::detail {
namespace {

// Elements [8 c, 8 c + 8) of a row as exact FP32; lanes past D are +0 (and nothing past D is read).
template <KvElement E>
inline __m256 load_chunk(const uint8_t* row, int64_t c, int64_t D) {
  const int64_t left = D - 8 * c;
  if constexpr (E == KvElement::kF32) {
    const float* p = reinterpret_cast<const float*>(row) + 8 * c;
    return left >= 8 ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, avx2::first_lanes_mask(left));
  } else {
    constexpr int64_t kBytes = kv_element_bytes(E);
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
    return E == KvElement::kBF16 ? avx2::bf16_decode8(raw) : avx2::e4m3_decode8(raw);
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

// s[i] = lanes 0-7 + lanes 8-15 (the tree's w = 8 step) of the 16-lane dot products of q with N
// rows (row i at rows + i * ld); D is padded to a multiple of 16 with zeros in q and the rows.
template <int N>
inline void score_rows(const float* rows, int64_t ld, const float* q, int64_t padded, __m256* s) {
  __m256 lo[N], hi[N];
  for (int i = 0; i < N; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t c = 0; c < padded; c += 16) {
    const __m256 q0 = _mm256_loadu_ps(q + c), q1 = _mm256_loadu_ps(q + c + 8);
    for (int i = 0; i < N; ++i) {
      lo[i] = _mm256_fmadd_ps(q0, _mm256_loadu_ps(rows + i * ld + c), lo[i]);
      hi[i] = _mm256_fmadd_ps(q1, _mm256_loadu_ps(rows + i * ld + c + 8), hi[i]);
    }
  }
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

// out[8 c0 .. 8 (c0 + NC)) of H queries: each value row is widened once and accumulated into
// every query that attends to it, lane by lane in position order.
template <KvElement E, int H, int NC>
void value_pass(const AttentionQuery* qs, const AttentionRows* runs, int num_runs, int64_t row_bytes, int64_t D,
                int64_t c0, float value_scale) {
  __m256 acc[H][NC];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_setzero_ps();
  int64_t shortest = qs[0].len, longest = qs[0].len;
  for (int h = 1; h < H; ++h) shortest = std::min(shortest, qs[h].len), longest = std::max(longest, qs[h].len);
  // Only the part of each row this pass reads is prefetched (several passes cover a row).
  constexpr int64_t kBytes = kv_element_bytes(E);
  const int64_t begin = 8 * c0 * kBytes, end = std::min(D, 8 * (c0 + NC)) * kBytes;
  int64_t j = 0;
  for (int s = 0; s < num_runs && j < longest; ++s) {
    const auto* v = static_cast<const uint8_t*>(runs[s].v);
    if (s + 1 < num_runs) prefetch_rows(runs[s + 1].v, runs[s + 1].rows, row_bytes, begin, end);
    for (int64_t i = 0; i < runs[s].rows && j < longest; ++i, ++j) {
      if (i % 16 == 0 && i + 16 < runs[s].rows)
        prefetch_rows(v + (i + 16) * row_bytes, runs[s].rows - i - 16, row_bytes, begin, end);
      __m256 vc[NC];
      for (int c = 0; c < NC; ++c) vc[c] = load_chunk<E>(v + i * row_bytes, c0 + c, D);
      if (j < shortest) {  // every query attends to j
        for (int h = 0; h < H; ++h) {
          const __m256 p = _mm256_broadcast_ss(qs[h].probs + j);
          for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_fmadd_ps(p, vc[c], acc[h][c]);
        }
      } else {  // the longer queries' last positions
        for (int h = 0; h < H; ++h)
          if (j < qs[h].len)
            for (int c = 0; c < NC; ++c)
              acc[h][c] = _mm256_fmadd_ps(_mm256_broadcast_ss(qs[h].probs + j), vc[c], acc[h][c]);
      }
    }
  }
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

// D padded to 16 (zeros past D): rows widened (or copied, for FP32 rows with D % 16 != 0).
template <KvElement E>
inline void widen_row(const uint8_t* row, int64_t D, int64_t padded, float* out) {
  for (int64_t c = 0; 8 * c < padded; ++c)
    _mm256_storeu_ps(out + 8 * c, 8 * c < D ? load_chunk<E>(row, c, D) : _mm256_setzero_ps());
}

template <KvElement E>
void attention_queries_typed(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, float score_scale, float value_scale, bool bf16_probs) {
  constexpr int64_t kBytes = kv_element_bytes(E);
  const int64_t row_bytes = stride * kBytes, padded = (D + 15) / 16 * 16;
  const __m256 scale = _mm256_set1_ps(score_scale);
  int64_t longest = 0;
  for (int i = 0; i < num_queries; ++i) longest = std::max(longest, qs[i].len);
  // FP32 rows with D a multiple of 16 are scored in place; others are widened (zero-padded) into
  // kbuf once per block of 16 keys and scored there for every query. Queries are zero-padded
  // likewise when D is not a multiple of 16.
  const bool in_place = E == KvElement::kF32 && D == padded;
  thread_local std::vector<float> kbuf, qbuf;  // grow once per thread
  if (kbuf.size() < static_cast<size_t>(16 * padded)) kbuf.resize(static_cast<size_t>(16 * padded));
  if (D != padded) {
    if (qbuf.size() < static_cast<size_t>(num_queries * padded)) qbuf.resize(static_cast<size_t>(num_queries * padded));
    for (int q = 0; q < num_queries; ++q) {
      std::memcpy(qbuf.data() + q * padded, qs[q].q, static_cast<size_t>(D) * 4);
      std::fill(qbuf.data() + q * padded + D, qbuf.data() + (q + 1) * padded, 0.0f);
    }
  }
  int64_t j = 0;
  for (int s = 0; s < num_runs && j < longest; ++s) {
    const auto* k = static_cast<const uint8_t*>(runs[s].k);
    for (int64_t i0 = 0; i0 < runs[s].rows && j < longest; i0 += 16) {
      const int64_t n = std::min<int64_t>(16, runs[s].rows - i0);
      if (i0 + 16 < runs[s].rows) {  // the next block of keys
        prefetch_rows(k + (i0 + 16) * row_bytes, runs[s].rows - i0 - 16, row_bytes, 0, D * kBytes);
      } else if (s + 1 < num_runs) {
        prefetch_rows(runs[s + 1].k, runs[s + 1].rows, row_bytes, 0, D * kBytes);
      }
      const float* rows = reinterpret_cast<const float*>(k + i0 * row_bytes);
      int64_t ld = stride;
      if (!in_place) {
        for (int64_t i = 0; i < n; ++i) widen_row<E>(k + (i0 + i) * row_bytes, D, padded, kbuf.data() + i * padded);
        rows = kbuf.data();
        ld = padded;
      }
      for (int q = 0; q < num_queries; ++q) {
        if (qs[q].len <= j) continue;
        const int64_t nq = std::min(n, qs[q].len - j);  // the keys this query sees
        const float* qv = D == padded ? qs[q].q : qbuf.data() + q * padded;
        for (int64_t b = 0; b < nq; b += 8)
          score_block8(rows + b * ld, ld, std::min<int64_t>(8, nq - b), qv, padded, scale, qs[q].probs + j + b);
      }
      j += n;
    }
  }
  for (int q = 0; q < num_queries; ++q) {
    softmax(qs[q].probs, qs[q].len);
    if (bf16_probs) bf16_round_f32(qs[q].probs, qs[q].len);  // attention_precision: bf16
  }
  // Value passes: up to 4 queries x 2 chunks, or fewer queries with more chunks (8 accumulators
  // cover the FMA latency), every row read once per pass.
  const int64_t chunks = (D + 7) / 8;
  for (int q = 0; q < num_queries; q += 4)
    with_count<4>(num_queries - q, [&](auto h) {
      constexpr int kHeads = decltype(h)::value, kMaxChunks = kHeads == 1 ? 8 : kHeads == 2 ? 4 : 2;
      for (int64_t c0 = 0; c0 < chunks; c0 += kMaxChunks)
        with_count<kMaxChunks>(
            chunks - c0, [&](auto nc) { value_pass<E, h, nc>(qs + q, runs, num_runs, row_bytes, D, c0, value_scale); });
    });
}

}  // namespace

void attention_queries_kv_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs, int num_runs,
                               int64_t D, int64_t stride, KvElement element, float score_scale, float value_scale,
                               bool bf16_probs) {
  switch (element) {
    case KvElement::kF32:
      return attention_queries_typed<KvElement::kF32>(queries, num_queries, runs, num_runs, D, stride, score_scale,
                                                      value_scale, bf16_probs);
    case KvElement::kBF16:
      return attention_queries_typed<KvElement::kBF16>(queries, num_queries, runs, num_runs, D, stride, score_scale,
                                                       value_scale, bf16_probs);
    case KvElement::kE4M3:
      return attention_queries_typed<KvElement::kE4M3>(queries, num_queries, runs, num_runs, D, stride, score_scale,
                                                       value_scale, bf16_probs);
  }
}

}  // namespace fp8rl::detail

FP8RL_AVX2_END
