// Causal grouped-query attention over a batch of right-padded sequences, forward next to
// backward. FP32 math; the products go through the GEMM entry points.
//
// Dimension letters: B sequences, T positions per sequence (row b*T + t), Hq query heads,
// Hkv key/value heads (Hq % Hkv == 0; query head h reads kv head h / (Hq/Hkv)), D head size.
//   q, o, dq, dout [B*T, Hq*D]      k, v, dk, dv [B*T, Hkv*D]      probs [B, Hq, T, T]
// Row t attends to positions s <= t of its own sequence; padding sits after a sequence's last
// token, so real tokens never see it (and nobody reads the padding rows' outputs).
//
//   scores = (q k^T) * (1/sqrt(D)), causal mask, softmax in FP32 -> probs; o = probs v
// The forward runs attention_row (attention_row.h) for every row: the generator's decode calls the
// same function, so both engines agree bit for bit. The backward uses the GEMM entry points.
//
// `bf16` (policy.attention_precision: bf16; q, k, v and dout must hold BF16 values, as they do
// with BF16 activations): the products run with BF16 operands and FP32 accumulation. Forward: P
// is rounded to BF16 right after the softmax (the probs saved for backward are those values),
// then P V. Backward: dP = dO V^T, dV = P^T dO, dQ = dS K, dK = dS^T Q on the BF16 GEMMs, with
// dS = P * (dP - rowsum(P * dP)) * scale computed in FP32 and rounded to BF16 once. Without it
// every product is FP32.
#pragma once

#include <cstdint>

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

void attention_forward(float* o, float* probs, const float* q, const float* k, const float* v, const AttentionShape& s,
                       bool bf16 = false, const AttentionHeadScales* head_scales = nullptr);

// Overwrites dq, dk and dv.
void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionShape& s, bool bf16 = false);

}  // namespace fp8rl
