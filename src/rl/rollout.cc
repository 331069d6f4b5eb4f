#include "rl/rollout.h"

#include <algorithm>

#include "core/check.h"

namespace fp8rl {

int64_t model_tokens(const Rollout& r) {
  return static_cast<int64_t>(r.response.size()) - std::count(r.observation.begin(), r.observation.end(), uint8_t{1});
}

TokenBatch rollout_batch(const std::vector<Rollout>& r, size_t begin, size_t end, int32_t pad, int64_t replay_width) {
  int64_t T = 1;
  for (size_t i = begin; i < end; ++i) T = std::max<int64_t>(T, static_cast<int64_t>(r[i].prompt.size() + r[i].response.size()));
  TokenBatch b = TokenBatch::empty(static_cast<int64_t>(end - begin), T, pad);
  for (size_t i = begin; i < end; ++i) {
    const size_t row0 = (i - begin) * static_cast<size_t>(T);
    std::copy(r[i].prompt.begin(), r[i].prompt.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(row0));
    std::copy(r[i].response.begin(), r[i].response.end(),
              b.tokens.begin() + static_cast<std::ptrdiff_t>(row0 + r[i].prompt.size()));
    // Row prompt.size()-1+j predicts response[j]. The last response token is input to no row
    // that matters; the batch's length counts it so its K/V exist for calibration.
    // Observation tokens are read, never predicted: no target, so no log-prob and no gradient.
    for (size_t j = 0; j < r[i].response.size(); ++j)
      if (!is_observation(r[i], j)) b.targets[row0 + r[i].prompt.size() - 1 + j] = r[i].response[j];
    b.lengths[i - begin] = static_cast<int32_t>(r[i].prompt.size() + r[i].response.size());
  }
  if (replay_width > 0) {
    b.experts.assign(static_cast<size_t>(b.B * b.T * replay_width), -1);
    for (size_t i = begin; i < end; ++i) {
      const size_t read = r[i].prompt.size() + r[i].response.size() - 1;
      FP8RL_CHECK(r[i].routing.size() == read * static_cast<size_t>(replay_width),
                  "router replay: rollout {} has {} routing entries from the generator, expected {} positions x {}", i,
                  r[i].routing.size(), read, replay_width);
      std::copy(r[i].routing.begin(), r[i].routing.end(),
                b.experts.begin() + static_cast<std::ptrdiff_t>((i - begin) * static_cast<size_t>(b.T * replay_width)));
    }
  }
  return b;
}

LossInputs loss_inputs(std::vector<Rollout>& r, size_t m0, size_t m1, const float* lp, int64_t T, bool prev_from_lp,
                       bool with_reference) {
  LossInputs in;
  in.offsets.push_back(0);
  for (size_t i = m0; i < m1; ++i) {
    const size_t start = (i - m0) * static_cast<size_t>(T) + r[i].prompt.size() - 1;  // row predicting response[0]
    if (prev_from_lp) r[i].prev.assign(lp + start, lp + start + r[i].response.size());
    for (size_t j = 0; j < r[i].response.size(); ++j) {
      if (is_observation(r[i], j)) continue;
      in.curr.push_back(lp[start + j]);
      in.prev.push_back(r[i].prev[j]);
      in.gen.push_back(r[i].gen[j]);
      if (with_reference) in.ref.push_back(r[i].ref[j]);
    }
    in.advantages.push_back(r[i].advantage);
    in.offsets.push_back(static_cast<int64_t>(in.curr.size()));
  }
  return in;
}

void scatter_token_grads(const std::vector<Rollout>& r, size_t m0, size_t m1, int64_t T, const std::vector<float>& grad,
                         float* dlogprob) {
  size_t n = 0;
  for (size_t i = m0; i < m1; ++i) {
    const size_t start = (i - m0) * static_cast<size_t>(T) + r[i].prompt.size() - 1;
    for (size_t j = 0; j < r[i].response.size(); ++j)
      if (!is_observation(r[i], j)) dlogprob[start + j] = grad[n++];
  }
  FP8RL_CHECK(n == grad.size(), "scatter_token_grads: {} gradients for {} model tokens", grad.size(), n);
}

}  // namespace fp8rl
