// AVX-512 BF16 attention_queries_kv for attention_precision bf16 (attention_row.h): Q K^T and P V
// on vdpbf16ps, bit-identical to the scalar template attention_row_bf16, whose step is this
// instruction's (a pair of products added as two FMAs, odd element first, DAZ in, FTZ out).
//   score: operands are BF16 words: q and FP32 rows truncated to their top halves, BF16 rows as
//          stored, E4M3 rows decoded exactly (the codec's table decoder gives BF16 words). One
//          vdpbf16ps per 32 elements per key: lane l steps over the pairs (32 c + 2 l, + 1) in
//          order; 16 keys' lanes then go through the template's tree at once (reduce_tree16).
//   softmax: the fp32 path's (exp_f32 lanes, the template's sums), then P rounded to BF16.
//   output: position pairs (2 t, 2 t + 1): the two value rows interleaved word by word
//          (vpunpck{l,h}wd) so that dword d holds (v_2t[d], v_2t+1[d]), times the broadcast pair
//          (p[2 t], p[2 t + 1]) in one vdpbf16ps per 16 outputs; a query whose length ends inside
//          a pair steps with a zero second row and probability, as the template does.
// Key rows are used in place where they are BF16 with D a multiple of 32 (the generator's BF16 KV
// pages); other rows are narrowed to BF16 words once per block of 16 keys, for every query.
// With transposed key pairs (AttentionRows::key_pairs, the trainer's) the scores take another route
// to the same bits: lane i of a vector is key i, one vdpbf16ps per (pair index, 16 keys) with the
// query's pair broadcast, each accumulator one lane l of the template, and the tree over l is then
// a sum of whole vectors (score_node): no shuffles, and each key load serves 4 queries.
#include <algorithm>
#include <cmath>
#include <cstring>
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

inline __mmask32 word_mask(int64_t left) {
  return left >= 32 ? ~__mmask32{0} : left <= 0 ? __mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
}

// vpermt2w indices of the high words of 32 dwords (16 in each operand): FP32 -> its top 16 bits.
inline __m512i high_words() {
  return _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19,
                          17, 15, 13, 11, 9, 7, 5, 3, 1);
}

// Elements [64 g, 64 g + 64) of rows as 2 x 32 BF16 words, zero past D: FP32 elements truncated
// to their top 16 bits (exact for the BF16 values this policy stores), BF16 as stored, E4M3
// decoded. The masks of the chunk are computed once for all the rows it loads.
template <DType E>
struct ChunkWords {
  ChunkWords(int64_t D, int64_t g, const avx512::E4m3Decoder& decoder) : dec(decoder), offset(64 * g * dtype_bytes(E)) {
    const int64_t left = D - 64 * g;
    bytes = avx512::first_bytes_mask(std::max<int64_t>(left, 0));
    words[0] = word_mask(left), words[1] = word_mask(left - 32);
    for (int m = 0; m < 4; ++m) lanes[m] = chunk_mask(D, 4 * g + m);
  }
  void load(const uint8_t* row, __m512i out[2]) const {
    row += offset;
    if constexpr (E == DType::kE4M3) {
      dec.decode64(_mm512_maskz_loadu_epi8(bytes, row), &out[0], &out[1]);
    } else if constexpr (E == DType::kBF16) {
      out[0] = _mm512_maskz_loadu_epi16(words[0], row);
      out[1] = _mm512_maskz_loadu_epi16(words[1], row + 64);
    } else {
      const auto* p = reinterpret_cast<const float*>(row);
      // Word w of the result: the high word of element w (w < 16, first vector) or w - 16 (second).
      __m512i f[4];
      for (int m = 0; m < 4; ++m) f[m] = _mm512_castps_si512(_mm512_maskz_loadu_ps(lanes[m], p + 16 * m));
      out[0] = _mm512_permutex2var_epi16(f[0], high_words(), f[1]);
      out[1] = _mm512_permutex2var_epi16(f[2], high_words(), f[3]);
    }
  }
  const avx512::E4m3Decoder& dec;
  int64_t offset;  // bytes from a row's start to element 64 g
  __mmask64 bytes;
  __mmask32 words[2];
  __mmask16 lanes[4];
};

template <DType E>
inline void load_words64(const uint8_t* row, int64_t g, int64_t D, const avx512::E4m3Decoder& dec, __m512i out[2]) {
  ChunkWords<E>(D, g, dec).load(row, out);
}

// A row of D elements as `padded` BF16 words (zeros past D).
template <DType E>
inline void narrow_row(const uint8_t* row, int64_t D, int64_t padded, const avx512::E4m3Decoder& dec, uint16_t* out) {
  for (int64_t g = 0; 64 * g < padded; ++g) {
    __m512i w[2];
    load_words64<E>(row, g, D, dec, w);
    _mm512_storeu_si512(out + 64 * g, w[0]);
    if (64 * g + 32 < padded) _mm512_storeu_si512(out + 64 * g + 32, w[1]);
  }
}

// Scores of up to 16 consecutive rows of BF16 words (row i at rows + i * ld, i < n; `padded`
// words, zeros past D) against q, in the template's order and times `scale`: element i is row
// i's score (rows past n are not read; their elements are junk).
inline __m512 score_block(const uint16_t* rows, int64_t ld, int64_t n, const uint16_t* q, int64_t padded,
                          __m512 scale) {
  __m512 acc[16];
  for (int i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c < padded; c += 32) {
    const __m512bh qc = (__m512bh)_mm512_loadu_si512(q + c);
    for (int i = 0; i < 16; ++i)
      if (i < n) acc[i] = _mm512_dpbf16_ps(acc[i], qc, (__m512bh)_mm512_loadu_si512(rows + i * ld + c));
  }
  return _mm512_mul_ps(reduce_tree16(acc), scale);
}

// node(L, W) of the template's score tree over 16 keys at once, for Q queries: lane i of out[q]
// is lanes[L] of query q's score of key i after the tree's steps of width >= 2 W. node(L, 16) is
// lane L's sum (pairs 16 c + L, c = 0, 1, ..., the vdpbf16ps step of score_block lane by lane),
// node(L, W) = node(L, 2 W) + node(L + W, 2 W), and node(0, 1) the score. `kt` points at the
// first key's column of the transposed pairs (ld apart), qp[q] at query q's pairs.
template <int Q, int L, int W>
inline void score_node(const uint32_t* kt, int64_t ld, const uint32_t* const* qp, int64_t chunks, __m512* out) {
  if constexpr (W == 16) {
    for (int q = 0; q < Q; ++q) out[q] = _mm512_setzero_ps();
    for (int64_t c = 0; c < chunks; ++c) {
      const __m512bh k = (__m512bh)_mm512_loadu_si512(kt + (16 * c + L) * ld);
      for (int q = 0; q < Q; ++q)
        out[q] = _mm512_dpbf16_ps(out[q], (__m512bh)_mm512_set1_epi32(static_cast<int>(qp[q][16 * c + L])), k);
    }
  } else {
    __m512 right[Q];
    score_node<Q, L, 2 * W>(kt, ld, qp, chunks, out);
    score_node<Q, L + W, 2 * W>(kt, ld, qp, chunks, right);
    for (int q = 0; q < Q; ++q) out[q] = _mm512_add_ps(out[q], right[q]);
  }
}

// The scores of every query against the runs' keys from their transposed pairs
// (AttentionRows::key_pairs): score_block's bits with no reduction shuffles, each key load shared by
// 4 queries. A block of 16 keys that runs past its run's end reads what lies beyond, and stores
// none of it.
void scores_from_key_pairs(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                           const uint16_t* qbuf, int64_t padded, __m512 scale) {
  const int64_t chunks = padded / 32;
  for (int q0 = 0; q0 < num_queries; q0 += 4)
    with_count_up_to_4(num_queries - q0, [&](auto count) {
      constexpr int Q = count;
      const uint32_t* qp[Q];
      int64_t longest = 0;
      for (int q = 0; q < Q; ++q) {
        qp[q] = reinterpret_cast<const uint32_t*>(qbuf + (q0 + q) * padded);
        longest = std::max(longest, qs[q0 + q].len);
      }
      int64_t first = 0;  // the run's first position
      for (int s = 0; s < num_runs && first < longest; first += runs[s++].rows)
        for (int64_t i = 0; i < runs[s].rows && first + i < longest; i += 16) {
          __m512 sc[Q];
          score_node<Q, 0, 1>(runs[s].key_pairs + i, runs[s].key_pairs_ld, qp, chunks, sc);
          const int64_t j = first + i, in_run = std::min<int64_t>(16, runs[s].rows - i);
          for (int q = 0; q < Q; ++q) {
            const int64_t nq = std::clamp<int64_t>(qs[q0 + q].len - j, 0, in_run);  // the keys this query sees
            _mm512_mask_storeu_ps(qs[q0 + q].probs + j, static_cast<__mmask16>((1u << nq) - 1),
                                  _mm512_mul_ps(sc[q], scale));
          }
        }
    });
}

// The scores of every query against the runs' key rows, 16 keys at a time, every query reading the
// block while it is in L1 (rows used in place or narrowed into `kbuf`, 16 x padded words).
template <DType E>
void scores_from_rows(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs, int64_t D,
                      int64_t stride, int64_t padded, int64_t longest, const uint16_t* qbuf, uint16_t* kbuf,
                      __m512 scale, const avx512::E4m3Decoder& dec) {
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t row_bytes = stride * kBytes;
  const bool in_place = E == DType::kBF16 && D == padded;
  int64_t j = 0;
  for (int s = 0; s < num_runs && j < longest; ++s) {
    const auto* k = static_cast<const uint8_t*>(runs[s].k);
    for (int64_t i0 = 0; i0 < runs[s].rows && j < longest; i0 += 16) {
      const int64_t n = std::min<int64_t>(16, runs[s].rows - i0);
      if (i0 + 16 < runs[s].rows)  // the next block of keys
        prefetch_rows<kBytes>(k + (i0 + 16) * row_bytes, runs[s].rows - i0 - 16, row_bytes, D);
      if (i0 == 0) {  // two runs (KV pages) ahead; the first run prefetches the second too
        if (s == 0 && num_runs > 1) prefetch_rows<kBytes>(runs[1].k, runs[1].rows, row_bytes, D);
        if (s + 2 < num_runs) prefetch_rows<kBytes>(runs[s + 2].k, runs[s + 2].rows, row_bytes, D);
      }
      const uint16_t* rows = reinterpret_cast<const uint16_t*>(k + i0 * row_bytes);
      int64_t ld = stride;
      if (!in_place) {
        for (int64_t i = 0; i < n; ++i) narrow_row<E>(k + (i0 + i) * row_bytes, D, padded, dec, kbuf + i * padded);
        rows = kbuf;
        ld = padded;
      }
      for (int q = 0; q < num_queries; ++q) {
        if (qs[q].len <= j) continue;
        const int64_t nq = std::min(n, qs[q].len - j);  // the keys this query sees
        _mm512_mask_storeu_ps(qs[q].probs + j, static_cast<__mmask16>((1u << nq) - 1),
                              score_block(rows, ld, nq, qbuf + q * padded, padded, scale));
      }
      j += n;
    }
  }
}

// The value rows in position order across the runs, prefetching as the fp32 path does where
// `prefetch`: always for KV pages (the generator's runs, from DRAM), for one run (the trainer's
// sequence, in L2) in the first pass only.
template <int64_t kBytes>
struct ValueRows {
  const AttentionRows* runs;
  int num_runs;
  int64_t row_bytes, D;
  bool prefetch;
  int s = 0;
  int64_t i = 0;
  // Moves past exhausted runs: row i of run s is the next one.
  void skip_ended_runs() {
    while (i == runs[s].rows) ++s, i = 0;
  }
  // The prefetches due when row i0 (a multiple of 16) of run s is read: the next 16 rows.
  void prefetch_at(int64_t i0) const {
    if (!prefetch) return;
    if (i0 == 0) {  // two runs (KV pages) ahead; the first run prefetches the second too
      if (s == 0 && num_runs > 1) prefetch_rows<kBytes>(runs[1].v, runs[1].rows, row_bytes, D);
      if (s + 2 < num_runs) prefetch_rows<kBytes>(runs[s + 2].v, runs[s + 2].rows, row_bytes, D);
    }
    if (i0 + 16 < runs[s].rows)
      prefetch_rows<kBytes>(static_cast<const uint8_t*>(runs[s].v) + (i0 + 16) * row_bytes, runs[s].rows - i0 - 16,
                            row_bytes, D);
  }
  const uint8_t* next() {
    skip_ended_runs();
    if (i % 16 == 0) prefetch_at(i);
    return static_cast<const uint8_t*>(runs[s].v) + (i++) * row_bytes;
  }
};

// acc[c] += the probability pair (two BF16 words) times the interleaved value words v_c, one
// vdpbf16ps each.
inline void add_pair(__m512* acc, uint32_t pair, __m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  const __m512bh p = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
  acc[0] = _mm512_dpbf16_ps(acc[0], p, (__m512bh)v0);
  acc[1] = _mm512_dpbf16_ps(acc[1], p, (__m512bh)v1);
  acc[2] = _mm512_dpbf16_ps(acc[2], p, (__m512bh)v2);
  acc[3] = _mm512_dpbf16_ps(acc[3], p, (__m512bh)v3);
}

// out[64 g, 64 g + 64) of H queries. pairs[h][t] holds query h's (p[2t], p[2t + 1]) as BF16 words
// (the second zero at or past its length). Accumulator 2k of a query holds the outputs
// 64 g + 32 k + 8 (i / 4) + i % 4 in lane i (vpunpcklwd's order), accumulator 2k + 1 the same + 4
// (vpunpckhwd's); the store puts them back in order. Every loop over the queries and accumulators
// is unrolled by pragma: without it GCC kept the H x 4 accumulators in memory and stored all 16 of
// them at each step (the row loads may alias them), which halved the pass's speed.
template <DType E, int H>
void value_pass(const AttentionQuery* qs, const uint32_t* const* pairs, const AttentionRows* runs, int num_runs,
                int64_t row_bytes, int64_t D, int64_t g, float value_scale, const avx512::E4m3Decoder& dec,
                bool prefetch) {
  __m512 acc[H][4];
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 4
    for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_setzero_ps();
  int64_t shortest = qs[0].len, longest = qs[0].len;
  for (int h = 1; h < H; ++h) shortest = std::min(shortest, qs[h].len), longest = std::max(longest, qs[h].len);
  ValueRows<dtype_bytes(E)> rows{runs, num_runs, row_bytes, D, prefetch};
  const ChunkWords<E> chunk(D, g, dec);
  auto add_rows = [&](const uint8_t* row_a, const uint8_t* row_b, int64_t j) {
    __m512i a[2], b[2];
    chunk.load(row_a, a);
    chunk.load(row_b, b);
    const __m512i v0 = _mm512_unpacklo_epi16(a[0], b[0]), v1 = _mm512_unpackhi_epi16(a[0], b[0]);
    const __m512i v2 = _mm512_unpacklo_epi16(a[1], b[1]), v3 = _mm512_unpackhi_epi16(a[1], b[1]);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) add_pair(acc[h], pairs[h][j / 2], v0, v1, v2, v3);
  };
  // Position pairs every query attends to both of (all but the last few for the trainer's
  // consecutive queries): the pairs inside one run in a loop of their own, so that the
  // accumulators stay in registers; a pair across two runs row by row.
  int64_t j = 0;
  while (j + 1 < shortest) {
    rows.skip_ended_runs();
    const int64_t n = std::min(runs[rows.s].rows - rows.i, shortest - j) / 2 * 2;  // rows of whole pairs here
    if (n == 0) {
      const uint8_t* row_a = rows.next();
      add_rows(row_a, rows.next(), j);
      j += 2;
      continue;
    }
    const auto* v = static_cast<const uint8_t*>(runs[rows.s].v);
    for (const int64_t end = rows.i + n; rows.i < end; rows.i += 2, j += 2) {
      if ((rows.i + 1) % 16 <= 1) rows.prefetch_at((rows.i + 1) / 16 * 16);  // the pair holds a row 16 k
      add_rows(v + rows.i * row_bytes, v + (rows.i + 1) * row_bytes, j);
    }
  }
  // The rest: a query ending at j steps with the second row zero (as the template's pair past len).
  for (; j < longest; j += 2) {
    __m512i a[2], b[2] = {_mm512_setzero_si512(), _mm512_setzero_si512()};
    chunk.load(rows.next(), a);
    if (j + 1 < longest) chunk.load(rows.next(), b);
#pragma GCC unroll 4
    for (int h = 0; h < H; ++h) {
      if (j >= qs[h].len) continue;
      const __m512i b0 = j + 1 < qs[h].len ? b[0] : _mm512_setzero_si512();
      const __m512i b1 = j + 1 < qs[h].len ? b[1] : _mm512_setzero_si512();
      add_pair(acc[h], pairs[h][j / 2], _mm512_unpacklo_epi16(a[0], b0), _mm512_unpackhi_epi16(a[0], b0),
               _mm512_unpacklo_epi16(a[1], b1), _mm512_unpackhi_epi16(a[1], b1));
    }
  }
  const __m512i first16 = _mm512_set_epi32(23, 22, 21, 20, 7, 6, 5, 4, 19, 18, 17, 16, 3, 2, 1, 0);
  const __m512i second16 = _mm512_set_epi32(31, 30, 29, 28, 15, 14, 13, 12, 27, 26, 25, 24, 11, 10, 9, 8);
#pragma GCC unroll 4
  for (int h = 0; h < H; ++h)
#pragma GCC unroll 2
    for (int k = 0; k < 2; ++k) {
      __m512 o[2] = {_mm512_permutex2var_ps(acc[h][2 * k], first16, acc[h][2 * k + 1]),
                     _mm512_permutex2var_ps(acc[h][2 * k], second16, acc[h][2 * k + 1])};
#pragma GCC unroll 2
      for (int m = 0; m < 2; ++m) {
        const int64_t chunk = 4 * g + 2 * k + m;  // 16 outputs
        if (16 * chunk >= D) break;
        if (value_scale != 1.0f) o[m] = _mm512_mul_ps(o[m], _mm512_set1_ps(value_scale));
        _mm512_mask_storeu_ps(qs[h].out + 16 * chunk, chunk_mask(D, chunk), o[m]);
      }
    }
}

template <DType E>
void attention_queries_typed(const AttentionQuery* qs, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, float score_scale, float value_scale) {
  constexpr int64_t kBytes = dtype_bytes(E);
  const int64_t padded = (D + 31) / 32 * 32, row_bytes = stride * kBytes;
  const __m512 scale = _mm512_set1_ps(score_scale);
  const avx512::E4m3Decoder dec;
  int64_t longest = 0;
  for (int i = 0; i < num_queries; ++i) longest = std::max(longest, qs[i].len);
  thread_local std::vector<uint16_t> kbuf, qbuf;  // grow once per thread
  thread_local std::vector<uint32_t> pbuf;
  thread_local std::vector<const uint32_t*> pairs;
  if (kbuf.size() < static_cast<size_t>(16 * padded)) kbuf.resize(static_cast<size_t>(16 * padded));
  if (qbuf.size() < static_cast<size_t>(num_queries * padded)) qbuf.resize(static_cast<size_t>(num_queries * padded));
  for (int q = 0; q < num_queries; ++q)
    narrow_row<DType::kF32>(reinterpret_cast<const uint8_t*>(qs[q].q), D, padded, dec, qbuf.data() + q * padded);

  // Scores: from the transposed key pairs where the caller has them, else from the rows.
  if (runs[0].key_pairs != nullptr) {
    scores_from_key_pairs(qs, num_queries, runs, num_runs, qbuf.data(), padded, scale);
  } else {
    scores_from_rows<E>(qs, num_queries, runs, num_runs, D, stride, padded, longest, qbuf.data(), kbuf.data(), scale,
                        dec);
  }

  // Softmax, P rounded to BF16 and paired: (p[2t], p[2t + 1]) as two BF16 words, zero past len.
  const int64_t max_pairs = (longest + 1) / 2;
  if (pbuf.size() < static_cast<size_t>(num_queries * max_pairs))
    pbuf.resize(static_cast<size_t>(num_queries * max_pairs));
  pairs.resize(static_cast<size_t>(num_queries));
  for (int q = 0; q < num_queries; ++q) {
    float* p = qs[q].probs;
    softmax(p, qs[q].len);
    bf16_round_f32_avx512(p, qs[q].len);  // this level's codec on this thread, not the pool's chunks
    if (qs[0].out == nullptr) continue;  // probabilities only: no pairs, no value pass
    uint32_t* pq = pbuf.data() + q * max_pairs;
    for (int64_t j0 = 0; j0 < qs[q].len; j0 += 32) {  // 32 probabilities -> 16 pairs (their top words)
      const __m512i lo = _mm512_castps_si512(_mm512_maskz_loadu_ps(chunk_mask(qs[q].len - j0, 0), p + j0));
      const __m512i hi = _mm512_castps_si512(_mm512_maskz_loadu_ps(chunk_mask(qs[q].len - j0, 1), p + j0 + 16));
      _mm512_mask_storeu_epi32(pq + j0 / 2, chunk_mask((qs[q].len - j0 + 1) / 2, 0),
                               _mm512_permutex2var_epi16(lo, high_words(), hi));
    }
    pairs[static_cast<size_t>(q)] = pq;
  }
  if (qs[0].out == nullptr) return;
  for (int q = 0; q < num_queries; q += 4)
    with_count_up_to_4(num_queries - q, [&](auto h) {
      for (int64_t g = 0; 64 * g < D; ++g)
        value_pass<E, h>(qs + q, pairs.data() + q, runs, num_runs, row_bytes, D, g, value_scale, dec,
                         /*prefetch=*/num_runs > 1 || (q == 0 && g == 0));
    });
}

}  // namespace

void attention_queries_kv_bf16_avx512(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                      int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                      float value_scale) {
  with_element(element, [&](auto e) {
    attention_queries_typed<e>(queries, num_queries, runs, num_runs, D, stride, score_scale, value_scale);
  });
}

}  // namespace fp8rl::detail

FP8RL_AVX512_END
