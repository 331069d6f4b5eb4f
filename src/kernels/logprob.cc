#include "kernels/logprob.h"

#include <cmath>

#include "core/check.h"

namespace fp8rl {

float logsumexp_row(const float* logits, int64_t V) {
  float max = -INFINITY;
  for (int64_t v = 0; v < V; ++v) max = std::max(max, logits[v]);
  double sum = 0.0;
  for (int64_t v = 0; v < V; ++v) sum += std::exp(static_cast<double>(logits[v] - max));
  return max + static_cast<float>(std::log(sum));
}

void token_logprobs_forward(float* logprob, const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] < 0) {
      logprob[n] = 0.0f;
      continue;
    }
    FP8RL_CHECK(targets[n] < V, "token id {} at position {} is outside the vocabulary of {}", targets[n], n, V);
    logprob[n] = logits[n * V + targets[n]] - logsumexp_row(logits + n * V, V);
  }
}

void token_logprobs_backward(float* dlogits, const float* dlogprob, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n) {
    float* d = dlogits + n * V;
    if (targets[n] < 0 || dlogprob[n] == 0.0f) {
      for (int64_t v = 0; v < V; ++v) d[v] = 0.0f;
      continue;
    }
    const float* row = logits + n * V;
    const float lse = logsumexp_row(row, V);
    for (int64_t v = 0; v < V; ++v) d[v] = -dlogprob[n] * std::exp(row[v] - lse);
    d[targets[n]] += dlogprob[n];
  }
}

}  // namespace fp8rl
