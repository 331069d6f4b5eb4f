// One query row of causal attention, in the fixed order both engines use: the trainer's
// attention_forward calls it for every row, the generator's decode calls it with keys and values
// read from its KV cache. Same inputs, same bits (docs/recipe.md section 1: the engines agree exactly).
//
// attention_precision fp32 (attention_row):
//   score[j] = dot(q, k_j) * score_scale          for j in [0, len)
//   p        = softmax(score) (max subtracted, exp_f32, summed in 16 lanes, times 1/sum)
//   out[d]   = (sum_j p[j] * v_j[d]) * value_scale   (j in index order, one FMA per term)
// The dot product runs in 16 FP32 lanes (element i goes to lane i % 16, one FMA per term)
// reduced in a fixed tree, so a vector path computes the same bits.
//
// attention_precision bf16 (attention_row_bf16): the products take BF16 operands and sum in FP32
// in the order of the AVX-512 BF16 dot product instruction (vdpbf16ps), which then computes them
// directly; the AVX2 and portable levels reproduce it with FMAs. The operands are the top 16
// bits of q, k and v (BF16 values already under this policy, so nothing is lost) and p rounded to
// BF16 after the FP32 softmax. One step of a lane adds a pair of products as two fused
// multiply-adds, the odd element's first, reading a denormal operand as zero and flushing a
// denormal result to zero (bf16_pair_step; the instruction's definition, checked against the
// hardware by the tests):
//   score[j] = tree(16 lanes) * score_scale: lane l steps over the element pairs
//              (32 c + 2 l, 32 c + 2 l + 1) for c = 0, 1, ..., zeros past D;
//   out[d]   = (lane d steps over the position pairs (2 t, 2 t + 1) in order, zeros at or past
//              len) * value_scale.
//
// `load_k(j, buf)` and `load_v(j, buf)` return a pointer to row j as D floats (they may widen BF16
// or decode FP8 into `buf`).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/cpu_features.h"
#include "core/dtype.h"
#include "numerics/bf16.h"

namespace fp8rl {

// The reduction tree of every 16-lane sum here: lanes[l] += lanes[l + w] for w = 8, 4, 2, 1.
inline float attention_tree_sum(float lanes[16]) {
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

inline float attention_dot(const float* a, const float* b, int64_t D) {
  float lanes[16] = {};
  for (int64_t i = 0; i < D; ++i) lanes[i % 16] = std::fma(a[i], b[i], lanes[i % 16]);
  return attention_tree_sum(lanes);
}

// p[j] = exp_f32(p[j] - max) * (1 / sum), the sum taken in 16 lanes (p[j] goes to lane j % 16,
// in index order) reduced by the tree above. The AVX-512 path computes the same bits 16 positions
// at a time (exp_f32 has bit-identical lanes, numerics/avx512_exp_inl.h).
void attention_softmax(float* p, int64_t len, float max);

// probs[j] = softmax over j of dot(q, k_j) * score_scale, for both precisions' templates.
template <typename Dot, typename LoadK>
void attention_scores_softmax(float* probs, const float* q, int64_t len, int64_t D, float score_scale, Dot dot,
                              LoadK load_k, float* scratch) {
  float max = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    probs[j] = dot(q, load_k(j, scratch), D) * score_scale;
    max = std::max(max, probs[j]);
  }
  attention_softmax(probs, len, max);
}

// probs[0..len) receives p. `scratch` holds D floats for the loaders.
template <typename LoadK, typename LoadV>
void attention_row(float* out, float* probs, const float* q, int64_t len, int64_t D, float score_scale,
                   float value_scale, LoadK load_k, LoadV load_v, float* scratch) {
  attention_scores_softmax(probs, q, len, D, score_scale, attention_dot, load_k, scratch);
  if (out == nullptr) return;  // probabilities only
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    const float* v = load_v(j, scratch);
    for (int64_t d = 0; d < D; ++d) out[d] = std::fma(probs[j], v[d], out[d]);
  }
  if (value_scale != 1.0f)
    for (int64_t d = 0; d < D; ++d) out[d] *= value_scale;
}

// The BF16 operand of x: its top 16 bits, a denormal read as zero.
inline float bf16_operand(float x) {
  uint32_t bits = std::bit_cast<uint32_t>(x) & 0xFFFF0000u;
  if ((bits & 0x7F800000u) == 0) bits &= 0x80000000u;
  return std::bit_cast<float>(bits);
}

// acc + a_odd * b_odd + a_even * b_even as vdpbf16ps adds them: two fused multiply-adds, the odd
// pair first, each result flushed to zero if denormal.
inline float bf16_pair_step(float acc, float a_odd, float b_odd, float a_even, float b_even) {
  auto flush = [](float r) {
    const uint32_t bits = std::bit_cast<uint32_t>(r);
    return (bits & 0x7F800000u) == 0 ? std::bit_cast<float>(bits & 0x80000000u) : r;
  };
  acc = flush(std::fma(bf16_operand(a_odd), bf16_operand(b_odd), acc));
  return flush(std::fma(bf16_operand(a_even), bf16_operand(b_even), acc));
}

// The bf16 score's dot product: 16 lanes of element pairs, zeros past D, then the tree.
inline float attention_dot_bf16(const float* a, const float* b, int64_t D) {
  float lanes[16] = {};
  auto at = [D](const float* x, int64_t i) { return i < D ? x[i] : 0.0f; };
  for (int64_t c = 0; 32 * c < D; ++c)
    for (int64_t l = 0; l < 16; ++l) {
      const int64_t i = 32 * c + 2 * l;
      lanes[l] = bf16_pair_step(lanes[l], at(a, i + 1), at(b, i + 1), at(a, i), at(b, i));
    }
  return attention_tree_sum(lanes);
}

// attention_precision bf16 (see the top of this file). `scratch` holds 2 D floats for the loaders
// (the two rows of a position pair).
template <typename LoadK, typename LoadV>
void attention_row_bf16(float* out, float* probs, const float* q, int64_t len, int64_t D, float score_scale,
                        float value_scale, LoadK load_k, LoadV load_v, float* scratch) {
  attention_scores_softmax(probs, q, len, D, score_scale, attention_dot_bf16, load_k, scratch);
  for (int64_t j = 0; j < len; ++j) probs[j] = bf16_to_f32(f32_to_bf16(probs[j]));
  if (out == nullptr) return;  // probabilities only
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < len; j += 2) {
    const float* v_even = load_v(j, scratch);
    const float* v_odd = j + 1 < len ? load_v(j + 1, scratch + D) : nullptr;
    const float p_odd = v_odd ? probs[j + 1] : 0.0f;
    for (int64_t d = 0; d < D; ++d)
      out[d] = bf16_pair_step(out[d], p_odd, v_odd ? v_odd[d] : 0.0f, probs[j], v_even[d]);
  }
  if (value_scale != 1.0f)
    for (int64_t d = 0; d < D; ++d) out[d] *= value_scale;
}

// Key and value rows are stored as DType::kF32 (the trainer), kBF16 or kE4M3 codes (the
// generator's KV pages). E4M3 rows hold the codes of k / k_scale and v / v_scale; the scales go
// into score_scale and value_scale, so the row values are the codes' exact E4M3 values.

// A run of consecutive positions: row i at k + i * stride elements (v likewise).
struct AttentionRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t rows = 0;
  // Optional, for the bf16 precision, on every run of a call or on none (the trainer's and the
  // prefix layout's): the same keys as BF16 pairs transposed, key_pairs[p * key_pairs_ld + j] =
  // the run's position j's elements (2 p, 2 p + 1) as one dword (the even element in the low
  // word), p < ceil(D / 32) * 16 (zero past D), j < `rows` rounded up to 16 (readable past `rows`:
  // those scores are not stored). The AVX-512 path then scores 16 keys per instruction with the
  // same bits; the other paths read k.
  const uint32_t* key_pairs = nullptr;
  int64_t key_pairs_ld = 0;
};

// One query of attention_queries_kv: query row q [D] attends to positions [0, len) and writes
// out [D] and probs [len]. `out` may be nullptr for every query of a call: the probabilities only
// (the trainer's backward recomputes P; the value pass is skipped).
struct AttentionQuery {
  const float* q;
  float* out;
  float* probs;
  int64_t len;
};

// attention_row for several queries that read the same key and value rows: the query heads of one
// GQA group (the generator's decode row), consecutive rows of one sequence with their causal
// lengths (the trainer), or both. Rows are of one element type and stride, split into `num_runs`
// runs of consecutive positions covering [0, longest len) in order (the trainer: one run per
// sequence; the generator: one per KV page, the shared prefix's pages first). Each query gets
// exactly the template's bits; rows are widened or decoded to FP32 exactly as they are read, once
// for all queries. The AVX-512 path (attention_row_avx512.cc) computes the same bits: each lane of
// its dot products, softmax sums and output sums keeps the scalar order.
void attention_queries_kv(const AttentionQuery* queries, int num_queries, const AttentionRows* runs, int num_runs,
                          int64_t D, int64_t stride, DType element, float score_scale, float value_scale,
                          bool bf16 = false, Isa isa = Isa::kAuto);

// `heads` queries of one row, all of length len: head h reads q + h * q_stride and writes
// out + h * out_stride and probs[h * probs_stride + j].
void attention_group_kv(float* out, int64_t out_stride, float* probs, int64_t probs_stride, const float* q,
                        int64_t q_stride, int64_t heads, const AttentionRows* runs, int num_runs, int64_t len,
                        int64_t D, int64_t stride, DType element, float score_scale, float value_scale,
                        bool bf16 = false, Isa isa = Isa::kAuto);

// One head.
inline void attention_row_kv(float* out, float* probs, const float* q, const AttentionRows* runs, int num_runs,
                             int64_t len, int64_t D, int64_t stride, DType element, float score_scale,
                             float value_scale, bool bf16 = false, Isa isa = Isa::kAuto) {
  attention_group_kv(out, D, probs, len, q, D, 1, runs, num_runs, len, D, stride, element, score_scale, value_scale,
                     bf16, isa);
}

namespace detail {
// fn(std::integral_constant<DType, element>{}): a row element type as a template argument.
template <typename Fn>
void with_element(DType element, const Fn& fn) {
  switch (element) {
    case DType::kF32: return fn(std::integral_constant<DType, DType::kF32>{});
    case DType::kBF16: return fn(std::integral_constant<DType, DType::kBF16>{});
    case DType::kE4M3: return fn(std::integral_constant<DType, DType::kE4M3>{});
    case DType::kI32:
    case DType::kU8: break;  // not KV rows (attention_queries_kv checks)
  }
}

// The SIMD paths of attention_queries_kv, after its checks (the portable one, the templates with
// row loaders, is in attention_row.cc): AVX2 (attention_row_avx2.cc for fp32,
// attention_row_bf16_avx2.cc for bf16) and AVX-512 (attention_row_avx512.cc for fp32,
// attention_row_bf16_avx512.cc for bf16 on vdpbf16ps).
void attention_queries_kv_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs, int num_runs,
                               int64_t D, int64_t stride, DType element, float score_scale, float value_scale);
void attention_queries_kv_avx512(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                 int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                 float value_scale);
void attention_queries_kv_bf16_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                    int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                    float value_scale);
void attention_queries_kv_bf16_avx512(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                      int num_runs, int64_t D, int64_t stride, DType element, float score_scale,
                                      float value_scale);
}  // namespace detail

}  // namespace fp8rl
