// One query row of causal attention, in the fixed order both engines use: the trainer's
// attention_forward calls it for every row, the generator's decode calls it with keys and values
// read from its KV cache. Same inputs, same bits (fp8-recipe.md invariant 1).
//
//   score[j] = dot(q, k_j) * score_scale          for j in [0, len)
//   p        = softmax(score) (max subtracted, exp_f32, summed in 16 lanes, times 1/sum),
//              rounded to BF16 when `bf16_probs` (attention_precision: bf16; q, k and v are BF16
//              values already, so P V then has BF16 operands and FP32 accumulation)
//   out[d]   = (sum_j p[j] * v_j[d]) * value_scale   (j in index order, one FMA per term)
//
// The dot product runs in 16 FP32 lanes (element i goes to lane i % 16, one FMA per term)
// reduced in a fixed tree, so a vector path computes the same bits. `load_k(j, buf)` and
// `load_v(j, buf)` return a pointer to row j as D floats (they may widen BF16 or decode FP8 into
// `buf`).
#pragma once

#include <cmath>
#include <cstdint>

#include "core/cpu_features.h"
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

// probs[0..len) receives p. `scratch` holds D floats for the loaders.
template <typename LoadK, typename LoadV>
void attention_row(float* out, float* probs, const float* q, int64_t len, int64_t D, float score_scale,
                   float value_scale, LoadK load_k, LoadV load_v, float* scratch, bool bf16_probs = false) {
  float max = -INFINITY;
  for (int64_t j = 0; j < len; ++j) {
    probs[j] = attention_dot(q, load_k(j, scratch), D) * score_scale;
    max = std::max(max, probs[j]);
  }
  attention_softmax(probs, len, max);
  if (bf16_probs)
    for (int64_t j = 0; j < len; ++j) probs[j] = bf16_to_f32(f32_to_bf16(probs[j]));
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    const float* v = load_v(j, scratch);
    for (int64_t d = 0; d < D; ++d) out[d] = std::fma(probs[j], v[d], out[d]);
  }
  if (value_scale != 1.0f)
    for (int64_t d = 0; d < D; ++d) out[d] *= value_scale;
}

// How key and value rows are stored: FP32 (the trainer), BF16 or E4M3 codes (the generator's KV
// pages). E4M3 rows hold the codes of k / k_scale and v / v_scale; the scales go into score_scale
// and value_scale, so the row values are the codes' exact E4M3 values.
enum class KvElement : uint8_t { kF32, kBF16, kE4M3 };
constexpr int64_t kv_element_bytes(KvElement e) { return e == KvElement::kF32 ? 4 : e == KvElement::kBF16 ? 2 : 1; }

// A run of consecutive positions: row i at k + i * stride elements (v likewise).
struct AttentionRows {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t rows = 0;
};

// One query of attention_queries_kv: query row q [D] attends to positions [0, len) and writes
// out [D] and probs [len].
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
                          int64_t D, int64_t stride, KvElement element, float score_scale, float value_scale,
                          bool bf16_probs = false, Isa isa = Isa::kAuto);

// `heads` queries of one row, all of length len: head h reads q + h * q_stride and writes
// out + h * out_stride and probs[h * probs_stride + j].
void attention_group_kv(float* out, int64_t out_stride, float* probs, int64_t probs_stride, const float* q,
                        int64_t q_stride, int64_t heads, const AttentionRows* runs, int num_runs, int64_t len,
                        int64_t D, int64_t stride, KvElement element, float score_scale, float value_scale,
                        bool bf16_probs = false, Isa isa = Isa::kAuto);

// One head.
inline void attention_row_kv(float* out, float* probs, const float* q, const AttentionRows* runs, int num_runs,
                             int64_t len, int64_t D, int64_t stride, KvElement element, float score_scale,
                             float value_scale, bool bf16_probs = false, Isa isa = Isa::kAuto) {
  attention_group_kv(out, D, probs, len, q, D, 1, runs, num_runs, len, D, stride, element, score_scale, value_scale,
                     bf16_probs, isa);
}

namespace detail {
// The paths of attention_queries_kv, after its checks: the portable one (attention_row with row
// loaders), AVX2 (attention_row_avx2.cc) and AVX-512 (attention_row_avx512.cc).
void attention_queries_kv_portable(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                   int num_runs, int64_t D, int64_t stride, KvElement element, float score_scale,
                                   float value_scale, bool bf16_probs);
void attention_queries_kv_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                               int num_runs, int64_t D, int64_t stride, KvElement element, float score_scale,
                               float value_scale, bool bf16_probs);
void attention_queries_kv_avx512(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                                 int num_runs, int64_t D, int64_t stride, KvElement element, float score_scale,
                                 float value_scale, bool bf16_probs);
}  // namespace detail

}  // namespace fp8rl
