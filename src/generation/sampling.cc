#include "generation/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/elementwise/logprob.h"

namespace fp8rl {

namespace {

// Truncated sampling's set: the k most likely tokens (ties by id), then the smallest prefix of
// them whose mass reaches top_p; sampling draws within it by the renormalised probabilities.
struct KeptSet {
  std::vector<int32_t> order;  // token ids by decreasing z; the first `keep` are kept
  int64_t keep = 0;
  double mass = 0;  // of the kept tokens, under softmax(z)
};

KeptSet kept_set(const float* z, int64_t V, float lse, const SamplingParams& p) {
  KeptSet s;
  s.order.resize(static_cast<size_t>(V));
  std::iota(s.order.begin(), s.order.end(), 0);
  std::stable_sort(s.order.begin(), s.order.end(), [&](int32_t a, int32_t b) { return z[a] > z[b]; });
  s.keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, V) : V;
  double mass = 0.0;
  for (int64_t i = 0; i < s.keep; ++i) {
    mass += std::exp(static_cast<double>(z[s.order[static_cast<size_t>(i)]] - lse));
    if (mass >= p.top_p) {
      s.keep = i + 1;
      break;
    }
  }
  for (int64_t i = 0; i < s.keep; ++i) s.mass += std::exp(static_cast<double>(z[s.order[static_cast<size_t>(i)]] - lse));
  return s;
}

void check_params(const SamplingParams& p) {
  FP8RL_CHECK(p.temperature >= 0.0f && p.top_p > 0.0f && p.top_p <= 1.0f && p.top_k >= 0,
              "sampling: temperature must be >= 0, top_p in (0, 1], top_k >= 0; got {}, {}, {}", p.temperature, p.top_p,
              p.top_k);
}

}  // namespace

float token_logprob(const float* logits, int64_t V, const SamplingParams& p, int32_t token, float* scratch) {
  check_params(p);
  FP8RL_CHECK(token >= 0 && token < V, "token_logprob: token {} outside the vocabulary [0, {})", token, V);
  if (p.temperature == 0.0f) return logits[token] - logsumexp_row(logits, V);
  const float* z = logits;
  if (p.temperature != 1.0f) {
    for (int64_t v = 0; v < V; ++v) scratch[v] = logits[v] / p.temperature;
    z = scratch;
  }
  const float lse = logsumexp_row(z, V);
  if (!((p.top_k > 0 && p.top_k < V) || p.top_p < 1.0f)) return z[token] - lse;
  const KeptSet kept = kept_set(z, V, lse, p);
  if (std::find(kept.order.begin(), kept.order.begin() + kept.keep, token) == kept.order.begin() + kept.keep)
    return -std::numeric_limits<float>::infinity();
  return static_cast<float>(static_cast<double>(z[token] - lse) - std::log(kept.mass));
}

SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& p, uint64_t sequence, uint64_t step,
                          float* scratch) {
  check_params(p);
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
  const KeptSet kept = kept_set(z, V, lse, p);
  const std::vector<int32_t>& order = kept.order;
  const int64_t keep = kept.keep;
  const double kept_mass = kept.mass;
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
