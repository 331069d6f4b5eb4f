// Causal grouped-query attention over a batch of right-padded sequences, forward next to
// backward. FP32 math; the products go through the GEMM entry points.
//
// Dimension letters: B sequences, T positions per sequence (row b*T + t), Hq query heads,
// Hkv key/value heads (Hq % Hkv == 0; query head h reads kv head h / (Hq/Hkv)), D head size.
//   q, o, dq, dout [B*T, Hq*D]      k, v, dk, dv [B*T, Hkv*D]
// Row t attends to positions s <= t of its own sequence; padding sits after a sequence's last
// token, so real tokens never see it (and nobody reads the padding rows' outputs).
//
//   scores = (q k^T) * (1/sqrt(D)), causal mask, softmax in FP32 -> P; o = P v
// The forward runs attention_row (attention_row.h) for every row: the generator's decode calls the
// same function, so both engines agree bit for bit. It keeps nothing: P [T, T] per head is never
// stored. The backward (the FlashAttention idea) recomputes P for blocks of 64 query rows with the
// very same row function (so the same bits), then runs its products on the GEMM entry points:
// memory O(64 T) per task instead of O(B Hq T^2).
//
// `bf16` (policy.attention_precision: bf16; q, k, v and dout must hold BF16 values, as they do
// with BF16 activations): the products run with BF16 operands and FP32 accumulation. Forward: P
// is rounded to BF16 right after the softmax (the backward's recomputed P is that rounded P),
// then P V. Backward: dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q on the BF16 GEMMs, with
// dS = P * (dP - rowsum(P * dP)) * scale computed in FP32 and rounded to BF16 once. Without it
// every product is FP32.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"

namespace fp8rl {

struct AttentionShape {
  int64_t B, T, Hq, Hkv, D;
};

// Per KV head multipliers of the forward (the generator's FP8 attention arithmetic): scores of kv
// head g's queries are dot(q, k) * score[g] instead of * 1/sqrt(D), its outputs (P v) * value[g].
// For q, k, v holding E4M3 code values: score[g] = q_scale * k_scale * (1/sqrt(D)), value[g] =
// v_scale, as the generator computes them.
struct AttentionHeadScales {
  const float* score = nullptr;  // [Hkv]
  const float* value = nullptr;  // [Hkv]
};

void attention_forward(float* o, const float* q, const float* k, const float* v, const AttentionShape& s,
                       bool bf16 = false, const AttentionHeadScales* head_scales = nullptr);

// Scratch of prefix_attention_forward under bf16: the K and V rows narrowed once per call to the
// BF16 operand words the bf16 row function multiplies (the top 16 bits of each FP32 element) and,
// where that function runs on AVX-512, each kv head's keys transposed into pairs
// (AttentionRows::key_pairs). Kept by the caller so that its storage is reused from call to call.
struct AttentionKvWords {
  AlignedBuffer<uint16_t> k, v;       // [Hkv][N][D]
  AlignedBuffer<uint32_t> key_pairs;  // [Hkv][ceil(D / 32) * 16][ld], or empty
  int64_t ld = 0;
};

// Causal attention over a prefix layout (the reference policy's log-probs and the KV scales'
// calibration, which compute each distinct prefix once): N = context_begin.size() - 1 rows, row n
// attends to rows context[context_begin[n] .. context_begin[n + 1]) in that order (its prefix,
// itself last). The context, cut into runs of consecutive rows, goes through attention_queries_kv
// with the arguments attention_forward gives it, so a row gets attention_forward's bits whenever
// its context holds the same q/k/v rows in the same order.
//   o, q [N, Hq*D]      k, v [N, Hkv*D]
void prefix_attention_forward(float* o, const float* q, const float* k, const float* v,
                              const std::vector<int64_t>& context_begin, const std::vector<int32_t>& context,
                              int64_t Hq, int64_t Hkv, int64_t D, bool bf16, const AttentionHeadScales* head_scales,
                              AttentionKvWords& words);

// What the forward attended over, when it is not the q, k, v the gradient flows through: with
// policy.fp8_kv_attention the forward reads E4M3 code values and per-head scales, the backward
// passes the gradient straight through to the scaled values. The backward recomputes P from these.
struct AttentionForwardInputs {
  const float* q = nullptr;  // [B*T, Hq*D]
  const float* k = nullptr;  // [B*T, Hkv*D]
  const float* v = nullptr;
  const AttentionHeadScales* head_scales = nullptr;
};

// Overwrites dq, dk and dv. P is recomputed from `forward` (nullptr: from q, k, v with the default
// scale), exactly as attention_forward computed it.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* q, const float* k,
                        const float* v, const AttentionShape& s, bool bf16 = false,
                        const AttentionForwardInputs* forward = nullptr);

}  // namespace fp8rl
