// The factor each attention score dot(q, k_j) is multiplied by (attention_row.h's score_scale),
// written once for both engines: the generator's KV pages and the trainer's view of them
// (policy.fp8_kv_attention) must agree to the bit. With E4M3 keys the rows hold the codes of
// k / k_scale, with FP8 attention the query too holds the codes of q / q_scale, so the scales
// come back here (docs/recipe.md section 6). Absent scales are 1, and multiplying by 1 is exact:
// BF16 and FP32 keys get 1 / sqrt(D) itself.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8rl {

inline float attention_score_scale(int64_t head_dim, float k_scale = 1.0f, float q_scale = 1.0f) {
  const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  return q_scale * k_scale * softmax_scale;
}

}  // namespace fp8rl
