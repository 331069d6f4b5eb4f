// AVX-512 attention_group_kv over FP32, BF16 or E4M3 rows (attention_row.h) for attention_precision
// fp32, bit-identical to the scalar template attention_row:
//   score: lane l of one 16-wide accumulator per key sums q[i] * k[i] for i = l, l + 16, ... in
//          order (one FMA per term; lanes past D never added to), then the same reduction tree
//          (halves of 8, 4, 2, 1 lanes added pairwise); times score_scale. Keys go 16 at a time
//          through a transposing reduction that performs exactly those additions for all 16
//          at once, instead of one latency-bound horizontal sum per key.
//   softmax: exp_f32 on 16 lanes (numerics/avx512_exp_inl.h), each lane summing every 16th
//          position in order, then the template's tree.
//   output: lane d sums p[j] * v_j[d] over j in order (one FMA per term), then * value_scale.
// Rows are widened (BF16) or decoded (E4M3, the codec's table decoder) to exact FP32 as they are
// loaded. The queries share the pass (the heads of a GQA group, consecutive rows of a sequence): a
// block of 16 key rows is widened once (narrow rows, into a per-thread buffer) and scored for
// every query while it is in L1; value rows are widened once per key and summed into up to four
// queries' accumulators at a time, each query stopping at its own length.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "kernels/attention/attention_row.h"
#include "numerics/codec.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "kernels/attention/attention_avx512_inl.h"
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see that header)
#include "numerics/avx512_exp_inl.h"

namespace fp8rl::detail {
namespace {

// Elements [16 c0, 16 c0 + 16 NC) of a row (NC <= 4 chunks) as exact FP32 vectors; lanes past D
// are zero. BF16 is widened by a shift; E4M3 goes through the codec's table decoder, 64 codes
// at a time, then the same widening. (NC is a template argument throughout, so that the
// accumulators of the passes below stay in registers.)
template <DType E, int NC>
inline void load_chunks(const uint8_t* row, int64_t c0, int64_t D, const avx512::E4m3Decoder& dec, __m512 out[4]) {
  if constexpr (E == DType::kE4M3) {
    const int64_t left = D - 16 * c0;
    const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
    __m512i lo, hi;
    dec.decode64(_mm512_maskz_loadu_epi8(m, row + 16 * c0), &lo, &hi);
    const __m256i h[4] = {_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1), _mm512_castsi512_si256(hi),
                          _mm512_extracti64x4_epi64(hi, 1)};
    for (int c = 0; c < NC; ++c) out[c] = avx512::bf16_decode16(h[c]);
  } else {
    for (int c = 0; c < NC; ++c) {
      const __mmask16 m = chunk_mask(D, c0 + c);
      if constexpr (E == DType::kF32)
        out[c] = _mm512_maskz_loadu_ps(m, reinterpret_cast<const float*>(row) + 16 * (c0 + c));
      else
        out[c] =
            avx512::bf16_decode16(_mm256_maskz_loadu_epi16(m, reinterpret_cast<const uint16_t*>(row) + 16 * (c0 + c)));
    }
  }
}

// Scores of up to 16 consecutive FP32 rows (row i at rows + i * ld, i < n) against q, reduced in
// the template's order and times `scale`: element i is row i's score (rows past n are not read;
// their elements are junk).
inline __m512 score_block(const float* rows, int64_t ld, int64_t n, const float* q, int64_t D, __m512 scale) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c * 16 < D; ++c) {
    const __mmask16 m = chunk_mask(D, c);
    const __m512 qc = _mm512_maskz_loadu_ps(m, q + 16 * c);
    if (n == 16) {  // the common case, without a mask per row (lanes past D add 0 * 0 to +0)
      for (int i = 0; i < 16; ++i)
        acc[i] = _mm512_fmadd_ps(qc, _mm512_maskz_loadu_ps(m, rows + i * ld + 16 * c), acc[i]);
      continue;
    }
    for (int i = 0; i < 16; ++i) {
      const __mmask16 mi = i < n ? m : __mmask16(0);
      acc[i] = _mm512_mask3_fmadd_ps(qc, _mm512_maskz_loadu_ps(mi, rows + i * ld + 16 * c), acc[i], mi);
    }
  }
  return _mm512_mul_ps(reduce_tree16(acc), scale);
}

// out[16 c0 .. 16 (c0 + NC)) of H queries (NC <= 4 chunks): each value row is widened once and
// accumulated into every query that attends to it, lane by lane in position order.
template <DType E, int H, int NC>
void value_pass(const AttentionQuery* qs, const AttentionRows* runs, int num_runs, int64_t row_bytes, int64_t D,
                int64_t c0, float value_scale, const avx512::E4m3Decoder& dec) {
  __m512 acc[H][4];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_setzero_ps();
  int64_t shortest = qs[0].len, longest = qs[0].len;
  for (int h = 1; h < H; ++h) shortest = std::min(shortest, qs[h].len), longest = std::max(longest, qs[h].len);
  int64_t j = 0;
  for (int s = 0; s < num_runs && j < longest; ++s) {
    const auto* v = static_cast<const uint8_t*>(runs[s].v);
    if (s + 1 < num_runs) prefetch_rows<dtype_bytes(E)>(runs[s + 1].v, runs[s + 1].rows, row_bytes, D);
    for (int64_t i = 0; i < runs[s].rows && j < longest; ++i, ++j) {
      if (i % 16 == 0 && i + 16 < runs[s].rows)
        prefetch_rows<dtype_bytes(E)>(v + (i + 16) * row_bytes, runs[s].rows - i - 16, row_bytes, D);
      __m512 vc[4];
      load_chunks<E, NC>(v + i * row_bytes, c0, D, dec, vc);
      if (j < shortest) {  // every query attends to j
        __m512 p[H];
        for (int h = 0; h < H; ++h) p[h] = _mm512_set1_ps(qs[h].probs[j]);
        for (int c = 0; c < NC; ++c)
          for (int h = 0; h < H; ++h) acc[h][c] = _mm512_fmadd_ps(p[h], vc[c], acc[h][c]);
      } else {  // the longer queries' last positions
        for (int h = 0; h < H; ++h)
          if (j < qs[h].len)
            for (int c = 0; c < NC; ++c) acc[h][c] = _mm512_fmadd_ps(_mm512_set1_ps(qs[h].probs[j]), vc[c], acc[h][c]);
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NC; ++c) {
      __m512 o = acc[h][c];
      if (value_scale != 1.0f) o = _mm512_mul_ps(o, _mm512_set1_ps(value_scale));
      _mm512_mask_storeu_ps(qs[h].out + 16 * (c0 + c), chunk_mask(D, c0 + c), o);
    }
}

template <DType E>
void attention_queries_typed(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, float score_scale, float value_scale) {
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t chunks = (D + 15) / 16, row_bytes = stride * kBytes;
  const __m512 scale = _mm512_set1_ps(score_scale);
  const avx512::E4m3Decoder dec;
  int64_t longest = 0;
  for (int i = 0; i < num_queries; ++i) longest = std::max(longest, qs[i].len);
  // Narrow (BF16, E4M3) key rows are widened once per block of 16 into FP32 rows, scored for
  // every query from there; FP32 rows are scored in place.
  const int64_t padded = chunks * 16;
  thread_local std::vector<float> kbuf;  // grows once per thread, never zeroed again
  if (kbuf.size() < static_cast<size_t>(16 * padded)) kbuf.resize(static_cast<size_t>(16 * padded));
  int64_t j = 0;
  for (int s = 0; s < num_runs && j < longest; ++s) {
    const auto* k = static_cast<const uint8_t*>(runs[s].k);
    for (int64_t i0 = 0; i0 < runs[s].rows && j < longest; i0 += 16) {
      const int64_t n = std::min<int64_t>(16, runs[s].rows - i0);
      if (i0 + 16 < runs[s].rows) {  // the next block of keys
        prefetch_rows<kBytes>(k + (i0 + 16) * row_bytes, runs[s].rows - i0 - 16, row_bytes, D);
      } else if (s + 1 < num_runs) {
        prefetch_rows<kBytes>(runs[s + 1].k, runs[s + 1].rows, row_bytes, D);
      }
      const float* rows = reinterpret_cast<const float*>(k + i0 * row_bytes);
      int64_t ld = stride;
      if constexpr (E != DType::kF32) {
        float* wide_rows = kbuf.data();
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c0 = 0; c0 < chunks; c0 += 4)
            with_count_up_to_4(chunks - c0, [&](auto nc) {
              __m512 wide[4];
              load_chunks<E, nc>(k + (i0 + i) * row_bytes, c0, D, dec, wide);
              for (int c = 0; c < nc; ++c) _mm512_storeu_ps(wide_rows + i * padded + 16 * (c0 + c), wide[c]);
            });
        rows = wide_rows;
        ld = padded;
      }
      for (int q = 0; q < num_queries; ++q) {
        if (qs[q].len <= j) continue;
        const int64_t nq = std::min(n, qs[q].len - j);  // the keys this query sees
        _mm512_mask_storeu_ps(qs[q].probs + j, static_cast<__mmask16>((1u << nq) - 1),
                              score_block(rows, ld, nq, qs[q].q, D, scale));
      }
      j += n;
    }
  }
  for (int q = 0; q < num_queries; ++q) softmax(qs[q].probs, qs[q].len);
  if (qs[0].out == nullptr) return;  // probabilities only
  for (int q = 0; q < num_queries; q += 4)
    with_count_up_to_4(num_queries - q, [&](auto h) {
      for (int64_t c0 = 0; c0 < chunks; c0 += 4)
        with_count_up_to_4(chunks - c0, [&](auto nc) {
          value_pass<E, h, nc>(qs + q, runs, num_runs, row_bytes, D, c0, value_scale, dec);
        });
    });
}

}  // namespace

void attention_queries_kv_avx512(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                 int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                 float value_scale) {
  with_element(element, [&](auto e) {
    attention_queries_typed<e>(queries, num_queries, runs, num_runs, D, stride, score_scale, value_scale);
  });
}

}  // namespace fp8rl::detail

FP8RL_AVX512_END
