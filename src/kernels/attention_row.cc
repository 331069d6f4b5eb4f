// attention_row_f32: the dispatcher and the portable path (attention_row with row loaders).
#include "kernels/attention_row.h"

#include <cmath>

#include "core/check.h"

namespace fp8rl {

void attention_softmax(float* p, int64_t len, float max) {
  float sum = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    p[j] = std::exp(p[j] - max);
    sum += p[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
}

void attention_row_f32(float* out, float* probs, const float* q, const AttentionRows* segments, int num_segments,
                       int64_t len, int64_t D, int64_t stride, float score_scale, float value_scale, Isa isa) {
  int64_t covered = 0;
  for (int s = 0; s < num_segments; ++s) covered += segments[s].rows;
  FP8RL_CHECK(len > 0 && covered == len, "attention_row_f32: the segments hold {} positions, the row attends to {}",
              covered, len);
  if (uses_avx512(resolve_isa(isa)))
    return detail::attention_row_f32_avx512(out, probs, q, segments, num_segments, len, D, stride, score_scale,
                                            value_scale);
  // Position j -> its segment, found by walking forward (positions are visited in order).
  auto loader = [&](bool key) {
    return [=, seg = 0, first = int64_t{0}](int64_t j, float*) mutable -> const float* {
      while (j >= first + segments[seg].rows) first += segments[seg++].rows;
      while (j < first) first -= segments[--seg].rows;
      return (key ? segments[seg].k : segments[seg].v) + (j - first) * stride;
    };
  };
  attention_row(out, probs, q, len, D, score_scale, value_scale, loader(true), loader(false), nullptr);
}

}  // namespace fp8rl
