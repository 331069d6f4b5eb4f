// AVX2 attention_queries_kv over FP32, BF16 or E4M3 rows (attention_row.h) for attention_precision
// fp32, bit-identical to the scalar template attention_row (bf16: attention_row_bf16_avx2.cc).
// The template's 16 lanes are two ymm vectors, lanes 0-7 and 8-15:
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

#include "kernels/attention/attention_row.h"
#include "numerics/codec.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "kernels/attention/attention_avx2_inl.h"
#include "numerics/avx2_codec_inl.h"  // inside the region by design (see that header)
#include "numerics/avx2_exp_inl.h"

namespace fp8rl::detail {
namespace {

// out[8 c0 .. 8 (c0 + NC)) of H queries: each value row is widened once and accumulated into
// every query that attends to it, lane by lane in position order.
template <DType E, int H, int NC>
void value_pass(const AttentionQuery* qs, const AttentionRows* runs, int num_runs, int64_t row_bytes, int64_t D,
                int64_t c0, float value_scale) {
  __m256 acc[H][NC];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_setzero_ps();
  int64_t shortest = qs[0].len, longest = qs[0].len;
  for (int h = 1; h < H; ++h) shortest = std::min(shortest, qs[h].len), longest = std::max(longest, qs[h].len);
  // Only the part of each row this pass reads is prefetched (several passes cover a row).
  constexpr int64_t kBytes = dtype_bytes(E);
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
  store_outputs<H, NC>(qs, acc, D, c0, value_scale);
}

template <DType E>
void attention_queries_typed(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, float score_scale, float value_scale) {
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t row_bytes = stride * kBytes, padded = (D + 15) / 16 * 16;
  const __m256 scale = _mm256_set1_ps(score_scale);
  int64_t longest = 0;
  for (int i = 0; i < num_queries; ++i) longest = std::max(longest, qs[i].len);
  // FP32 rows with D a multiple of 16 are scored in place; others are widened (zero-padded) into
  // kbuf once per block of 16 keys and scored there for every query. Queries are zero-padded
  // likewise when D is not a multiple of 16.
  const bool in_place = E == DType::kF32 && D == padded;
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
  for (int q = 0; q < num_queries; ++q) softmax(qs[q].probs, qs[q].len);
  if (qs[0].out == nullptr) return;  // probabilities only
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
                               int64_t D, int64_t stride, DType element, float score_scale, float value_scale) {
  with_element(element, [&](auto e) {
    attention_queries_typed<e>(queries, num_queries, runs, num_runs, D, stride, score_scale, value_scale);
  });
}

}  // namespace fp8rl::detail

FP8RL_AVX2_END
