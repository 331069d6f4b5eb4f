// AVX2 attention_queries_kv for attention_precision bf16 (attention_row.h), bit-identical to the
// scalar template attention_row_bf16 without a BF16 dot product instruction. The template's pair
// step is two FMAs with denormal operands read as zero and denormal results flushed to zero: the
// FP32 FMAs compute exactly that on operands made DAZ as they are prepared, with the MXCSR's FTZ
// bit set (FlushToZero) around the products only: the reduction trees, the softmax and the
// value scale run without it, as in the template.
//   score: each key row (and q) is rewritten in pair order, its low 16 bits cleared (the BF16
//          operand): within 32 elements, the 16 odd ones (lane l: element 2 l + 1), then the 16
//          even ones (lane l: element 2 l). The fp32 path's 16-lane dot product over that order
//          steps lane l over the template's pairs, odd product first; the lanes of every key
//          are kept, then reduced by the template's tree with the MXCSR restored.
//   output: lane d over the position pairs, the odd position's FMA first; a query whose length
//          ends inside a pair adds a zero product first, as the template does.
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

// FTZ in the MXCSR of this thread for the lifetime of the object. (Not DAZ: the E4M3 decoder
// scales denormal bit patterns into normal values; the operands are made DAZ explicitly.)
class FlushToZero {
 public:
  FlushToZero() { _mm_setcsr(saved_ | 0x8000u); }
  ~FlushToZero() { _mm_setcsr(saved_); }
  FlushToZero(const FlushToZero&) = delete;
  FlushToZero& operator=(const FlushToZero&) = delete;

 private:
  const unsigned saved_ = _mm_getcsr();
};

// The BF16 operand of each lane (attention_row.h's bf16_operand): the top 16 bits, a denormal
// read as (signed) zero.
inline __m256 bf16_operand(__m256 x) {
  const __m256i bits = _mm256_and_si256(_mm256_castps_si256(x), _mm256_set1_epi32(-65536));
  const __m256i denormal =
      _mm256_cmpeq_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7F800000)), _mm256_setzero_si256());
  return _mm256_castsi256_ps(_mm256_andnot_si256(_mm256_and_si256(denormal, _mm256_set1_epi32(0x7FFFFFFF)), bits));
}

// p as a BF16 operand (p is a BF16 value: only a denormal changes, to zero).
inline __m256 probability_operand(const float* p) {
  const float x = (std::bit_cast<uint32_t>(*p) & 0x7F800000u) == 0 ? 0.0f : *p;  // p >= 0
  return _mm256_set1_ps(x);
}

// [x0 x1 | x2 x3] (64-bit pieces) -> [x0 x2 | x1 x3]: shuffle_ps's lane-wise result in element order.
inline __m256 in_element_order(__m256 x) { return _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(x), 0xD8)); }

// A row as `padded` (a multiple of 32) floats in pair order with the low 16 bits cleared, zeros
// past D: out[32 c + l] = element 32 c + 2 l + 1, out[32 c + 16 + l] = element 32 c + 2 l.
// `wide` holds `padded` floats of scratch (not used for E4M3 rows).
template <DType E>
inline void pair_order_row(const uint8_t* row, int64_t D, int64_t padded, float* wide, float* out) {
  if constexpr (E == DType::kE4M3) {
    // Codes reordered before decoding, 32 at a time: the decoded values are exact BF16 values and
    // never FP32 denormals, so they are their own BF16 operands.
    for (int64_t c = 0; c < padded; c += 32) {
      __m256i codes;
      if (c + 32 <= D) {
        codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + c));
      } else {  // code 0 decodes to +0
        alignas(32) uint8_t buf[32] = {};
        if (c < D) std::memcpy(buf, row + c, static_cast<size_t>(D - c));
        codes = _mm256_load_si256(reinterpret_cast<const __m256i*>(buf));
      }
      // Per 16-byte lane: its 8 odd codes, then its 8 even ones; then the quadwords in the order
      // odd 0-15, odd 16-31, even 0-15, even 16-31.
      const __m256i split = _mm256_setr_epi8(1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14,  //
                                             1, 3, 5, 7, 9, 11, 13, 15, 0, 2, 4, 6, 8, 10, 12, 14);
      const __m256i ordered = _mm256_permute4x64_epi64(_mm256_shuffle_epi8(codes, split), 0xD8);
      const __m128i lo = _mm256_castsi256_si128(ordered), hi = _mm256_extracti128_si256(ordered, 1);
      _mm256_storeu_ps(out + c, avx2::e4m3_decode8(lo));
      _mm256_storeu_ps(out + c + 8, avx2::e4m3_decode8(_mm_unpackhi_epi64(lo, lo)));
      _mm256_storeu_ps(out + c + 16, avx2::e4m3_decode8(hi));
      _mm256_storeu_ps(out + c + 24, avx2::e4m3_decode8(_mm_unpackhi_epi64(hi, hi)));
    }
  } else {
    widen_row<E>(row, D, padded, wide);
    for (int64_t c = 0; c < padded; c += 32)
      for (int64_t h = 0; h < 2; ++h) {  // the pairs of elements c + 16 h .. c + 16 h + 15: lanes 8 h .. 8 h + 7
        const __m256 a = _mm256_loadu_ps(wide + c + 16 * h), b = _mm256_loadu_ps(wide + c + 16 * h + 8);
        // shuffle_ps: [a1 a3 b1 b3 | a5 a7 b5 b7] (odd) and [a0 a2 b0 b2 | a4 a6 b4 b6] (even).
        _mm256_storeu_ps(out + c + 8 * h, bf16_operand(in_element_order(_mm256_shuffle_ps(a, b, 0xDD))));
        _mm256_storeu_ps(out + c + 16 + 8 * h, bf16_operand(in_element_order(_mm256_shuffle_ps(a, b, 0x88))));
      }
  }
}

// acc[c] += p * row[c] for the NC chunks, one FMA each.
template <int NC>
inline void add_row(__m256* acc, __m256 p, const __m256* row) {
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_fmadd_ps(p, row[c], acc[c]);
}

// out[8 c0 .. 8 (c0 + NC)) of H queries over position pairs: lane d adds p[2t+1] * v_2t+1[d], then
// p[2t] * v_2t[d] (a zero product first where a query ends at 2 t), under FTZ with DAZ operands;
// the value scale after them, without FTZ.
template <DType E, int H, int NC>
void value_pass(const AttentionQuery* qs, const AttentionRows* runs, int num_runs, int64_t row_bytes, int64_t D,
                int64_t c0, float value_scale) {
  __m256 acc[H][NC];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_setzero_ps();
  int64_t shortest = qs[0].len, longest = qs[0].len;
  for (int h = 1; h < H; ++h) shortest = std::min(shortest, qs[h].len), longest = std::max(longest, qs[h].len);
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t begin = 8 * c0 * kBytes, end = std::min(D, 8 * (c0 + NC)) * kBytes;
  int s = 0;
  int64_t i = 0;
  auto next_row = [&] {  // the next position's value row, prefetching as the fp32 path does
    while (i == runs[s].rows) ++s, i = 0;
    const auto* v = static_cast<const uint8_t*>(runs[s].v);
    if (i == 0 && s + 1 < num_runs) prefetch_rows(runs[s + 1].v, runs[s + 1].rows, row_bytes, begin, end);
    if (i % 16 == 0 && i + 16 < runs[s].rows)
      prefetch_rows(v + (i + 16) * row_bytes, runs[s].rows - i - 16, row_bytes, begin, end);
    return v + (i++) * row_bytes;
  };
  auto load = [&](const uint8_t* row, __m256* out) {  // E4M3 values are never denormal in FP32
    for (int c = 0; c < NC; ++c) {
      out[c] = load_chunk<E>(row, c0 + c, D);
      if constexpr (E != DType::kE4M3) out[c] = bf16_operand(out[c]);
    }
  };
  {
    const FlushToZero flush;
    // Position pairs every query attends to both of: a loop of its own (accumulators in registers).
    int64_t j = 0;
    for (; j + 1 < shortest; j += 2) {
      __m256 even[NC], odd[NC];
      load(next_row(), even);
      load(next_row(), odd);
      for (int h = 0; h < H; ++h) {
        add_row<NC>(acc[h], probability_operand(qs[h].probs + j + 1), odd);
        add_row<NC>(acc[h], probability_operand(qs[h].probs + j), even);
      }
    }
    for (; j < longest; j += 2) {
      __m256 even[NC], odd[NC] = {};
      load(next_row(), even);
      if (j + 1 < longest) load(next_row(), odd);
      for (int h = 0; h < H; ++h) {
        if (j >= qs[h].len) continue;
        if (j + 1 < qs[h].len) {
          add_row<NC>(acc[h], probability_operand(qs[h].probs + j + 1), odd);
        } else {  // the template's zero pair past len: acc + 0 * 0
          for (int c = 0; c < NC; ++c) acc[h][c] = _mm256_add_ps(acc[h][c], _mm256_setzero_ps());
        }
        add_row<NC>(acc[h], probability_operand(qs[h].probs + j), even);
      }
    }
  }
  store_outputs<H, NC>(qs, acc, D, c0, value_scale);
}

template <DType E>
void attention_queries_typed(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, float score_scale, float value_scale) {
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t row_bytes = stride * kBytes, padded = (D + 31) / 32 * 32;
  const __m256 scale = _mm256_set1_ps(score_scale);
  int64_t longest = 0;
  for (int i = 0; i < num_queries; ++i) longest = std::max(longest, qs[i].len);
  // Per thread, grown once: 16 key rows and the queries in pair order, a row's widening, and the
  // 16 lanes of every query's score of every key ([query][key][16]).
  thread_local std::vector<float> kbuf, qbuf, wide, lanes;
  const auto grow = [](std::vector<float>& v, int64_t n) {
    if (v.size() < static_cast<size_t>(n)) v.resize(static_cast<size_t>(n));
  };
  grow(kbuf, 16 * padded), grow(wide, padded), grow(qbuf, num_queries * padded), grow(lanes, num_queries * longest * 16);
  for (int q = 0; q < num_queries; ++q)
    pair_order_row<DType::kF32>(reinterpret_cast<const uint8_t*>(qs[q].q), D, padded, wide.data(),
                                    qbuf.data() + q * padded);
  {  // The lanes under FTZ (one MXCSR write each way per call; the key rows' reordering is exact
     // under it), 16 keys at a time, four at a time per query.
    const FlushToZero flush;
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
        for (int64_t i = 0; i < n; ++i)
          pair_order_row<E>(k + (i0 + i) * row_bytes, D, padded, wide.data(), kbuf.data() + i * padded);
        for (int q = 0; q < num_queries; ++q) {
          float* out = lanes.data() + (q * longest + j) * 16;
          const int64_t nq = std::min(n, qs[q].len - j);
          for (int64_t i = 0; i < nq; i += 4)
            with_count<4>(nq - i, [&](auto nr) {
              __m256 lo[4], hi[4];
              lane_sums<nr>(kbuf.data() + i * padded, padded, qbuf.data() + q * padded, padded, lo, hi);
              for (int r = 0; r < nr; ++r) {
                _mm256_storeu_ps(out + (i + r) * 16, lo[r]);
                _mm256_storeu_ps(out + (i + r) * 16 + 8, hi[r]);
              }
            });
        }
        j += n;
      }
    }
  }
  for (int q = 0; q < num_queries; ++q)  // the template's tree, 8 keys at a time, without FTZ
    for (int64_t b = 0; b < qs[q].len; b += 8) {
      const int64_t nb = std::min<int64_t>(8, qs[q].len - b);
      __m256 sums[8];
      for (int r = 0; r < 8; ++r) {
        const float* l = lanes.data() + (q * longest + b + r) * 16;
        sums[r] = r < nb ? _mm256_add_ps(_mm256_loadu_ps(l), _mm256_loadu_ps(l + 8)) : _mm256_setzero_ps();
      }
      _mm256_maskstore_ps(qs[q].probs + b, avx2::first_lanes_mask(nb), _mm256_mul_ps(reduce_tree8(sums), scale));
    }
  for (int q = 0; q < num_queries; ++q) {
    softmax(qs[q].probs, qs[q].len);
    bf16_round_f32_avx2(qs[q].probs, qs[q].len);  // this level's codec on this thread, not the pool's chunks
  }
  if (qs[0].out == nullptr) return;  // probabilities only
  // Value passes: up to 4 queries x 2 chunks, or fewer queries with more chunks.
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

void attention_queries_kv_bf16_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                    int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                    float value_scale) {
  with_element(element, [&](auto e) {
    attention_queries_typed<e>(queries, num_queries, runs, num_runs, D, stride, score_scale, value_scale);
  });
}

}  // namespace fp8rl::detail

FP8RL_AVX2_END
