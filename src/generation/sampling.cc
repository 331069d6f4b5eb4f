#include "generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/logprob.h"

namespace fp8rl {

SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& p, uint64_t sequence, uint64_t step,
                          float* scratch) {
  FP8RL_CHECK(p.temperature >= 0.0f && p.top_p > 0.0f && p.top_p <= 1.0f && p.top_k >= 0,
              "sampling: temperature must be >= 0, top_p in (0, 1], top_k >= 0; got {}, {}, {}", p.temperature, p.top_p,
              p.top_k);
  if (p.temperature == 0.0f) {
    int32_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logits[v] > logits[best]) best = static_cast<int32_t>(v);
    return {best, logits[best] - logsumexp_row(logits, V)};
  }
  // z = logits / temperature (the identity at temperature 1, so the log-prob is the trainer's).
  const float* z = logits;
  if (p.temperature != 1.0f) {
    for (int64_t v = 0; v < V; ++v) scratch[v] = logits[v] / p.temperature;
    z = scratch;
  }
  const float lse = logsumexp_row(z, V);
  const bool truncate = (p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f;
  const double u = random_uniform(p.seed, sequence, step);
  if (!truncate) {
    // Inverse CDF in token-id order over p_v = exp_f32(z_v - lse) (computed vectorized into the
    // second half of the scratch), summed in double.
    float* probs = scratch + V;
    softmax_probs_row(probs, z, V, lse);
    double cumulative = 0.0;
    int32_t token = static_cast<int32_t>(V - 1);
    for (int64_t v = 0; v < V; ++v) {
      cumulative += static_cast<double>(probs[v]);
      if (u < cumulative) {
        token = static_cast<int32_t>(v);
        break;
      }
    }
    return {token, z[token] - lse};
  }
  // Truncated: the k most likely tokens (ties by id), then the smallest prefix of them whose mass
  // reaches top_p; sample within the kept set by its renormalised probabilities.
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  double mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) {
    mass += std::exp(static_cast<double>(z[order[static_cast<size_t>(i)]] - lse));
    if (mass >= p.top_p) {
      keep = i + 1;
      break;
    }
  }
  double kept_mass = 0.0;
  for (int64_t i = 0; i < keep; ++i) kept_mass += std::exp(static_cast<double>(z[order[static_cast<size_t>(i)]] - lse));
  double cumulative = 0.0;
  int32_t token = order[static_cast<size_t>(keep - 1)];
  for (int64_t i = 0; i < keep; ++i) {
    const int32_t v = order[static_cast<size_t>(i)];
    cumulative += std::exp(static_cast<double>(z[v] - lse)) / kept_mass;
    if (u < cumulative) {
      token = v;
      break;
    }
  }
  return {token, static_cast<float>(static_cast<double>(z[token] - lse) - std::log(kept_mass))};
}

}  // namespace fp8rl
