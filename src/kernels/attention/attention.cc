#include "kernels/attention/attention.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "core/thread_pool.h"
#include "kernels/attention/attention_row.h"
#include "kernels/gemm/gemm.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {
void check_shape(const AttentionShape& s) {
  FP8RL_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hkv > 0 && s.D > 0 && s.Hq % s.Hkv == 0,
              "attention: bad shape B={} T={} Hq={} Hkv={} D={}", s.B, s.T, s.Hq, s.Hkv, s.D);
}

// The key and value rows of one (sequence, kv head) as the row function reads them.
struct KvRows {
  const void* k;
  const void* v;
  int64_t stride;  // elements from one position to the next
  DType element;
  const uint32_t* key_pairs = nullptr;  // AttentionRows::key_pairs, or none
  int64_t key_pairs_ld = 0;
};

// The BF16 operand word of an FP32 element: its top 16 bits.
uint16_t high_word(float x) { return static_cast<uint16_t>(std::bit_cast<uint32_t>(x) >> 16); }

// Whether the bf16 row function runs on AVX-512, which scores 16 keys at a time from transposed
// key pairs (AttentionRows::key_pairs); the other levels read the key rows.
bool uses_key_pairs() {
  static const bool transposed = uses_avx512(resolve_isa(Isa::kAuto));
  return transposed;
}

// `rows` rows of D FP32 elements (`ld` apart) as their BF16 operand words, into out [rows][D].
void narrow_rows(const float* src, int64_t ld, int64_t rows, int64_t D, uint16_t* out) {
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t d = 0; d < D; ++d) *out++ = high_word(src[t * ld + d]);
}

int64_t num_key_pairs(int64_t D) { return (D + 31) / 32 * 16; }

// The stride of transposed pairs that holds positions [0, rows): an odd number of cache lines from
// one pair's keys to the next, as a power-of-two stride would put the 64 lines a block of 16 keys
// reads into two L1 sets.
int64_t key_pairs_ld(int64_t rows) {
  const int64_t lines = (rows + 15) / 16;
  return (lines % 2 == 0 ? lines + 1 : lines) * 16;
}

// Positions [t0, t1) of BF16 operand words (position t's D words at words + t * words_ld) into
// transposed pairs: pairs[p * ld + t] = word 2 p + 1 << 16 | word 2 p, zeros past D.
void transpose_key_pairs(const uint16_t* words, int64_t words_ld, int64_t t0, int64_t t1, int64_t D, uint32_t* pairs,
                         int64_t ld) {
  for (int64_t t = t0; t < t1; ++t)
    for (int64_t p = 0; p < num_key_pairs(D); ++p) {
      const uint32_t even = 2 * p < D ? words[t * words_ld + 2 * p] : 0u;
      const uint32_t odd = 2 * p + 1 < D ? words[t * words_ld + 2 * p + 1] : 0u;
      pairs[p * ld + t] = odd << 16 | even;
    }
}

// Sequence b's rows of kv head g. With `bf16` they are narrowed once to their BF16 operands (the
// top 16 bits of each FP32 element, which is what the bf16 row function multiplies: the same bits
// whatever the values) into `words` [2][T][D]: the row function then reads BF16 rows in place, as
// it reads the generator's BF16 KV pages, instead of narrowing them again for every call. Where
// the row function runs on AVX-512, the keys also go into `pairs` transposed
// (AttentionRows::key_pairs: [ceil(D / 32) * 16][T rounded up to 16]), from which it scores 16
// keys at a time.
KvRows kv_rows(const float* k, const float* v, const AttentionShape& s, int64_t b, int64_t g, bool bf16,
               std::vector<uint16_t>& words, std::vector<uint32_t>& pairs) {
  const int64_t ldkv = s.Hkv * s.D, offset = b * s.T * ldkv + g * s.D;
  if (!bf16) return {k + offset, v + offset, ldkv, DType::kF32};
  words.resize(static_cast<size_t>(2 * s.T * s.D));
  narrow_rows(k + offset, ldkv, s.T, s.D, words.data());
  narrow_rows(v + offset, ldkv, s.T, s.D, words.data() + s.T * s.D);
  KvRows rows{words.data(), words.data() + s.T * s.D, s.D, DType::kBF16};
  if (!uses_key_pairs()) return rows;
  const int64_t ld = key_pairs_ld(s.T);
  pairs.assign(static_cast<size_t>(num_key_pairs(s.D) * ld), 0u);
  transpose_key_pairs(words.data(), s.D, 0, s.T, s.D, pairs.data(), ld);
  rows.key_pairs = pairs.data();
  rows.key_pairs_ld = ld;
  return rows;
}

// The queries of rows [t0, t0 + rows) of sequence b, for the query heads of kv head g, in the
// order attention_forward issues them (row-major, heads inner): head h's row t writes its
// output to o_at(t, h) and its probabilities to p_at(t, h), which the caller sizes for t + 1.
template <typename OAt, typename PAt>
void attend_rows(const float* q, const KvRows& kv, const AttentionShape& s, int64_t b, int64_t g, int64_t t0,
                 int64_t rows, bool bf16, const AttentionHeadScales* head_scales, OAt o_at, PAt p_at,
                 std::vector<AttentionQuery>& queries) {
  const int64_t ldq = s.Hq * s.D, group = s.Hq / s.Hkv, h0 = g * group;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  queries.clear();
  for (int64_t t = t0; t < t0 + rows; ++t)
    for (int64_t h = h0; h < h0 + group; ++h)
      queries.push_back({q + (b * s.T + t) * ldq + h * s.D, o_at(t, h), p_at(t, h), t + 1});
  const AttentionRows causal{kv.k, kv.v, t0 + rows, kv.key_pairs, kv.key_pairs_ld};
  attention_queries_kv(queries.data(), static_cast<int>(queries.size()), &causal, 1, s.D, kv.stride, kv.element,
                       head_scales ? head_scales->score[g] : scale, head_scales ? head_scales->value[g] : 1.0f, bf16);
}

// Rows per attention_queries_kv call: they read the same K/V rows, which then come from L1 for all
// of them instead of from L2 for each row.
constexpr int64_t kRowsPerCall = 8;

}  // namespace

void attention_forward(float* o, const float* q, const float* k, const float* v, const AttentionShape& s, bool bf16,
                       const AttentionHeadScales* head_scales) {
  check_shape(s);
  const int64_t ldq = s.Hq * s.D, group = s.Hq / s.Hkv;
  // One task per (sequence, kv head). Disjoint outputs, the same arithmetic on any thread; P lives
  // in the task's scratch only.
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv;
    thread_local std::vector<float> probs;  // [kRowsPerCall * group, T]
    thread_local std::vector<AttentionQuery> queries;
    thread_local std::vector<uint16_t> kv_words;
    thread_local std::vector<uint32_t> key_pairs;
    probs.resize(static_cast<size_t>(kRowsPerCall * group * s.T));
    const KvRows kv = kv_rows(k, v, s, b, g, bf16, kv_words, key_pairs);
    for (int64_t t0 = 0; t0 < s.T; t0 += kRowsPerCall) {
      const int64_t rows = std::min(kRowsPerCall, s.T - t0);
      attend_rows(
          q, kv, s, b, g, t0, rows, bf16, head_scales,
          [&](int64_t t, int64_t h) { return o + (b * s.T + t) * ldq + h * s.D; },
          [&](int64_t t, int64_t h) { return probs.data() + ((t - t0) * group + h - g * group) * s.T; }, queries);
    }
  });
}

void prefix_attention_forward(float* o, const float* q, const float* k, const float* v,
                              const std::vector<int64_t>& context_begin, const std::vector<int32_t>& context,
                              int64_t Hq, int64_t Hkv, int64_t D, bool bf16, const AttentionHeadScales* head_scales,
                              AttentionKvWords& words) {
  constexpr int64_t kRowsPerTask = 16;
  const int64_t N = static_cast<int64_t>(context_begin.size()) - 1, ldq = Hq * D, ldkv = Hkv * D, group = Hq / Hkv;
  FP8RL_CHECK(N >= 0 && Hq > 0 && Hkv > 0 && D > 0 && Hq % Hkv == 0,
              "prefix attention: bad shape N={} Hq={} Hkv={} D={}", N, Hq, Hkv, D);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // The rows the calls read: FP32 as given, or under bf16 narrowed once for every call (as
  // attention_forward does per sequence) into one block per kv head, [Hkv][N][D] (a head's rows
  // adjacent, as attention_forward's are), with the keys transposed where the row function takes
  // them so.
  const void *k_rows = k, *v_rows = v;
  DType element = DType::kF32;
  const bool transposed = bf16 && uses_key_pairs();
  const int64_t num_pairs = num_key_pairs(D), ld = transposed ? key_pairs_ld(N + 15) : 0;  // runs start at any row
  if (bf16) {
    words.k.resize(static_cast<size_t>(N * ldkv)), words.v.resize(static_cast<size_t>(N * ldkv));
    if (transposed) words.key_pairs.resize(static_cast<size_t>(Hkv * num_pairs * ld));
    words.ld = ld;
    // 16 rows per task: each task writes whole cache lines of the pairs.
    kernel_thread_pool().parallel_for((N + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
      const int64_t n0 = task * kRowsPerTask, n1 = std::min(N, n0 + kRowsPerTask);
      for (int64_t g = 0; g < Hkv; ++g) {
        narrow_rows(k + n0 * ldkv + g * D, ldkv, n1 - n0, D, words.k.data() + (g * N + n0) * D);
        narrow_rows(v + n0 * ldkv + g * D, ldkv, n1 - n0, D, words.v.data() + (g * N + n0) * D);
        if (transposed)
          transpose_key_pairs(words.k.data() + g * N * D, D, n0, n1, D, words.key_pairs.data() + g * num_pairs * ld,
                              ld);
      }
    });
    for (int64_t p = 0; transposed && p < Hkv * num_pairs; ++p)  // past the last row: read, never stored
      std::fill(words.key_pairs.data() + p * ld + N, words.key_pairs.data() + (p + 1) * ld, 0u);
    k_rows = words.k.data(), v_rows = words.v.data(), element = DType::kBF16;
  }
  auto length = [&](int64_t n) {
    return context_begin[static_cast<size_t>(n) + 1] - context_begin[static_cast<size_t>(n)];
  };
  // Whether row n's context is row n - 1's followed by n itself.
  auto extends_previous = [&](int64_t n) {
    const int64_t len = length(n);
    return n > 0 && len >= 2 && len == length(n - 1) + 1 &&
           context[static_cast<size_t>(context_begin[static_cast<size_t>(n)] + len - 2)] == n - 1;
  };
  // Rows whose context is the previous row's plus themselves (a sequence's own tokens, laid out
  // one after another) go up to kRowsPerCall at a time through one call over the last one's runs,
  // as attention_forward's blocks of rows do: each K/V row is read once for all of them (a query's
  // bits do not depend on the other queries of its call).
  kernel_thread_pool().parallel_for((N + kRowsPerTask - 1) / kRowsPerTask, [&](int64_t task) {
    std::vector<float> probs;
    std::vector<std::pair<int64_t, int64_t>> spans;  // the runs' (first row, rows)
    std::vector<AttentionRows> runs;
    std::vector<AttentionQuery> queries;
    const int64_t end = std::min(N, (task + 1) * kRowsPerTask);
    for (int64_t n0 = task * kRowsPerTask; n0 < end;) {
      int64_t n1 = n0 + 1;  // rows [n0, n1) share the runs of row n1 - 1
      while (n1 < end && n1 - n0 < kRowsPerCall && extends_previous(n1)) ++n1;
      const int64_t last = n1 - 1, len = length(last);
      const int32_t* ctx = context.data() + context_begin[static_cast<size_t>(last)];
      probs.resize(static_cast<size_t>((n1 - n0) * group * len));
      spans.clear();
      for (int64_t j = 0; j < len; ++j) {
        if (j > 0 && ctx[j] == ctx[j - 1] + 1) {
          ++spans.back().second;
        } else {
          spans.emplace_back(ctx[j], 1);
        }
      }
      for (int64_t g = 0; g < Hkv; ++g) {
        runs.clear();
        for (const auto& [row, rows] : spans) {
          const int64_t at = (bf16 ? (g * N + row) * D : row * ldkv + g * D) * dtype_bytes(element);
          runs.push_back({static_cast<const uint8_t*>(k_rows) + at, static_cast<const uint8_t*>(v_rows) + at, rows});
          if (transposed) {
            runs.back().key_pairs = words.key_pairs.data() + g * num_pairs * ld + row;
            runs.back().key_pairs_ld = ld;
          }
        }
        queries.clear();
        for (int64_t n = n0; n < n1; ++n)
          for (int64_t h = g * group; h < (g + 1) * group; ++h)
            queries.push_back({q + n * ldq + h * D, o + n * ldq + h * D,
                               probs.data() + ((n - n0) * group + h - g * group) * len, length(n)});
        attention_queries_kv(queries.data(), static_cast<int>(queries.size()), runs.data(),
                             static_cast<int>(runs.size()), D, bf16 ? D : ldkv, element,
                             head_scales ? head_scales->score[g] : scale, head_scales ? head_scales->value[g] : 1.0f,
                             bf16);
      }
      n0 = n1;
    }
  });
}

namespace {

// Row t of the softmax backward with the score scale, over dP in place: dS[j] = P[j] (dP[j] -
// sum_j P dP) * scale for j <= t, zero for t < j < width. The sum runs in 16 lanes (lane l takes
// j = l mod 16, in order) and then the tree, written 16 at a time so that the compiler keeps the
// lanes in vector registers: each product rounded, then added, as the scalar loop does.
void softmax_backward_row(const float* p, float* dp, int64_t t, int64_t width, float scale) {
  float lanes[16] = {};
  const int64_t n = t + 1, full = n / 16 * 16;
  for (int64_t j = 0; j < full; j += 16)
    for (int64_t l = 0; l < 16; ++l) lanes[l] += p[j + l] * dp[j + l];
  for (int64_t j = full; j < n; ++j) lanes[j - full] += p[j] * dp[j];
  const float dot = attention_tree_sum(lanes);
  for (int64_t j = 0; j < n; ++j) dp[j] = p[j] * (dp[j] - dot) * scale;
  std::fill(dp + n, dp + width, 0.0f);
}

// Query rows per backward block.
constexpr int64_t kBlock = 64;

// P of query rows [t0, t0 + tn) of sequence b for the query heads of kv head g, recomputed with the
// forward's row function from its inputs (probabilities only, no value pass): probs
// [group][tn][width] (width = t0 + tn), zero past each row's causal length.
void recompute_probs(std::vector<float>& probs, std::vector<AttentionQuery>& queries, const AttentionForwardInputs& in,
                     const KvRows& kv, const AttentionShape& s, int64_t b, int64_t g, int64_t t0, int64_t tn,
                     bool bf16) {
  const int64_t group = s.Hq / s.Hkv, width = t0 + tn;
  probs.resize(static_cast<size_t>(group * tn * width));
  for (int64_t r0 = t0; r0 < t0 + tn; r0 += kRowsPerCall) {
    const int64_t rows = std::min(kRowsPerCall, t0 + tn - r0);
    attend_rows(
        in.q, kv, s, b, g, r0, rows, bf16, in.head_scales, [](int64_t, int64_t) -> float* { return nullptr; },
        [&](int64_t t, int64_t h) { return probs.data() + ((h - g * group) * tn + t - t0) * width; }, queries);
  }
  for (int64_t i = 0; i < group; ++i)
    for (int64_t t = t0; t < t0 + tn; ++t) {
      float* row = probs.data() + (i * tn + t - t0) * width;
      std::fill(row + t + 1, row + width, 0.0f);
    }
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const AttentionShape& s, bool bf16, const AttentionForwardInputs* forward) {
  check_shape(s);
  const AttentionForwardInputs in = forward != nullptr ? *forward : AttentionForwardInputs{q, k, v, nullptr};
  const int64_t T = s.T, D = s.D, ldq = s.Hq * D, ldkv = s.Hkv * D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // The BF16 codes of rows of D values (`ld` apart) into [rows, D], one call per row on this thread.
  const detail::Bf16EncodeFn encode = detail::bf16_encode_f32_kernel(Isa::kAuto);
  auto to_bf16_rows = [&](bf16_t* dst, const float* src, int64_t rows, int64_t ld) {
    for (int64_t r = 0; r < rows; ++r) encode(src + r * ld, dst + r * D, D);
  };
  // One task per (sequence, kv head); inside it, blocks of kBlock query rows in order, so dK and dV
  // of the kv head accumulate in one fixed order whatever the thread count. Causal: a block's rows
  // see only keys < width = t0 + tn, so every product covers [tn, width] and skips the zero part.
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv, kv_off = b * T * ldkv + g * D;
    for (int64_t t = 0; t < T; ++t) {  // the task's own rows of dK and dV, zeroed where it adds to them
      std::fill_n(dk + kv_off + t * ldkv, D, 0.0f);
      std::fill_n(dv + kv_off + t * ldkv, D, 0.0f);
    }
    // P, then dP and dS, of a block: [group][tn][width], the group's query heads one after the other.
    thread_local std::vector<float> probs, ds;
    thread_local std::vector<AttentionQuery> queries;
    // BF16 operands of a block: Q and dO of the group's query heads, [group][tn][D]; P and dS;
    // K and V of the kv head [T, D] where they are not the forward's own rows.
    thread_local std::vector<bf16_t> kb, vb, qb, ob, pb, sb;
    thread_local std::vector<float> dq_block;
    thread_local std::vector<uint16_t> kv_words;  // the forward's K and V rows (kv_rows)
    thread_local std::vector<uint32_t> key_pairs;
    const KvRows kv = kv_rows(in.k, in.v, s, b, g, bf16, kv_words, key_pairs);
    auto q_offset = [&](int64_t i) { return b * T * ldq + (g * group + i) * D; };
    const bf16_t *kt = nullptr, *vt = nullptr;
    if (bf16 && in.k == k && in.v == v) {  // the words the forward read: BF16 values, so exactly their codes
      kt = static_cast<const bf16_t*>(kv.k), vt = static_cast<const bf16_t*>(kv.v);
    } else if (bf16) {  // the gradient flows to other values than the forward read (E4M3 attention)
      kb.resize(static_cast<size_t>(T * D)), vb.resize(static_cast<size_t>(T * D));
      to_bf16_rows(kb.data(), k + kv_off, T, ldkv);
      to_bf16_rows(vb.data(), v + kv_off, T, ldkv);
      kt = kb.data(), vt = vb.data();
    }
    for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
      const int64_t tn = std::min(kBlock, T - t0), width = t0 + tn, rows = group * tn;
      recompute_probs(probs, queries, in, kv, s, b, g, t0, tn, bf16);
      ds.resize(static_cast<size_t>(rows * width));
      if (bf16) {
        // The group's heads share K and V: one product over the block's stacked rows of every head.
        qb.resize(static_cast<size_t>(rows * D)), ob.resize(static_cast<size_t>(rows * D));
        for (int64_t i = 0; i < group; ++i) {
          to_bf16_rows(qb.data() + i * tn * D, q + q_offset(i) + t0 * ldq, tn, ldq);
          to_bf16_rows(ob.data() + i * tn * D, dout + q_offset(i) + t0 * ldq, tn, ldq);  // dO rounded here
        }
        pb.resize(static_cast<size_t>(rows * width)), sb.resize(static_cast<size_t>(rows * width));
        dq_block.resize(static_cast<size_t>(rows * D));
        encode(probs.data(), pb.data(), rows * width);  // P is BF16-valued already: exact
        gemm_tn_bf16(width, D, rows, pb.data(), width, ob.data(), D, dv + kv_off, ldkv,
                     /*accumulate=*/true);                                    // dV += P^T dO
        gemm_nt_bf16(rows, width, D, ob.data(), D, vt, D, ds.data(), width);  // dP = dO V^T
        for (int64_t r = 0; r < rows; ++r) {  // dS, rounded to BF16 once (row r: head r / tn, position t0 + r % tn)
          float* dr = ds.data() + r * width;
          softmax_backward_row(probs.data() + r * width, dr, t0 + r % tn, width, scale);
          encode(dr, sb.data() + r * width, width);
        }
        gemm_nn_bf16(rows, D, width, sb.data(), width, kt, D, dq_block.data(), D);  // dQ = dS K
        for (int64_t r = 0; r < rows; ++r)
          std::copy_n(dq_block.data() + r * D, D, dq + q_offset(r / tn) + (t0 + r % tn) * ldq);
        gemm_tn_bf16(width, D, rows, sb.data(), width, qb.data(), D, dk + kv_off, ldkv,
                     /*accumulate=*/true);  // dK += dS^T Q
        continue;
      }
      for (int64_t i = 0; i < group; ++i) {  // FP32: head by head, reading Q and dO in place
        const int64_t q_off = q_offset(i);
        const float* p = probs.data() + i * tn * width;  // [tn, width]
        float* dsi = ds.data() + i * tn * width;
        const float* oi = dout + q_off + t0 * ldq;  // [tn, D], stride ldq
        gemm_tn_f32(width, D, tn, p, width, oi, ldq, dv + kv_off, ldkv, /*accumulate=*/true);
        gemm_nt_f32(tn, width, D, oi, ldq, v + kv_off, ldkv, dsi, width);
        for (int64_t r = 0; r < tn; ++r) softmax_backward_row(p + r * width, dsi + r * width, t0 + r, width, scale);
        gemm_nn_f32(tn, D, width, dsi, width, k + kv_off, ldkv, dq + q_off + t0 * ldq, ldq);
        gemm_tn_f32(width, D, tn, dsi, width, q + q_off + t0 * ldq, ldq, dk + kv_off, ldkv, /*accumulate=*/true);
      }
    }
  });
}

}  // namespace fp8rl
