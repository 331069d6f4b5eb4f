// How the trainer reads a rollout (rl/rollout.h): observation tokens of a multi-turn rollout are
// context only. They get no target in the trainer's batch, and whatever log-probs sit at their
// positions (generator, trainer, previous or reference policy) change neither the loss, the KL,
// the metrics nor the gradient, which is zero there.
// ctest-file-label: quick
#include "rl/rollout.h"

#include <gtest/gtest.h>

#include "rl/grpo_loss.h"

namespace fp8rl {
namespace {

// Two rollouts: a single-turn one, and one whose response is [m m o o m m] (o: observation).
std::vector<Rollout> two_rollouts(float observation_value) {
  std::vector<Rollout> r(2);
  r[0].prompt = {1, 5, 6};
  r[0].response = {7, 8, 2};
  r[1].prompt = {1, 9};
  r[1].response = {10, 11, 40, 41, 12, 2};
  r[1].observation = {0, 0, 1, 1, 0, 0};
  const auto fill = [](Rollout& x, float base, float at_observations) {
    for (std::vector<float>* v : {&x.gen, &x.prev, &x.ref}) {
      v->clear();
      for (size_t j = 0; j < x.response.size(); ++j) v->push_back(is_observation(x, j) ? at_observations : base - 0.1f * static_cast<float>(j));
    }
  };
  fill(r[0], -1.0f, 0.0f);
  fill(r[1], -2.0f, observation_value);
  r[0].advantage = 0.5f;
  r[1].advantage = -1.0f;
  return r;
}

TEST(Rollout, ObservationTokensAreReadButNeverPredicted) {
  std::vector<Rollout> r = two_rollouts(0.0f);
  EXPECT_EQ(model_tokens(r[0]), 3);
  EXPECT_EQ(model_tokens(r[1]), 4);
  const TokenBatch b = rollout_batch(r, 0, 2, /*pad=*/0, /*replay_width=*/0);
  ASSERT_EQ(b.T, 8);
  // Rollout 1 in row 1: tokens 1 9 | 10 11 40 41 12 2; row 1+j predicts response[j].
  const std::vector<int32_t> tokens(b.tokens.begin() + 8, b.tokens.end());
  const std::vector<int32_t> targets(b.targets.begin() + 8, b.targets.end());
  EXPECT_EQ(tokens, (std::vector<int32_t>{1, 9, 10, 11, 40, 41, 12, 2}));
  EXPECT_EQ(targets, (std::vector<int32_t>{-1, 10, 11, -1, -1, 12, 2, -1}));
  EXPECT_EQ(std::vector<int32_t>(b.targets.begin(), b.targets.begin() + 8), (std::vector<int32_t>{-1, -1, 7, 8, 2, -1, -1, -1}));
}

TEST(Rollout, ObservationsCarryNoLossKlRatioOrGradient) {
  GrpoLossConfig config;
  config.reference_policy_kl_penalty = 0.1;
  config.use_importance_sampling_correction = true;
  // Twice: log-probs at the observations' positions 0, then absurd; the trainer's own there too.
  std::vector<GrpoLossResult> results;
  std::vector<std::vector<float>> dlps;
  for (const float at_observations : {0.0f, -37.0f}) {
    std::vector<Rollout> r = two_rollouts(at_observations);
    std::vector<float> lp(16, at_observations);  // [B*T] as rollout_batch lays them out
    const float curr0[] = {-1.05f, -1.2f, -1.25f}, curr1[] = {-2.0f, -2.05f, -2.5f, -2.55f};
    for (int j = 0; j < 3; ++j) lp[static_cast<size_t>(2 + j)] = curr0[j];
    for (int j : {0, 1}) lp[static_cast<size_t>(8 + 1 + j)] = curr1[j];
    for (int j : {4, 5}) lp[static_cast<size_t>(8 + 1 + j)] = curr1[j - 2];
    const LossInputs in = loss_inputs(r, 0, 2, lp.data(), 8, /*prev_from_lp=*/false, /*with_reference=*/true);
    ASSERT_EQ(in.curr.size(), 7u);
    EXPECT_EQ(in.offsets, (std::vector<int64_t>{0, 3, 7}));
    const GrpoLossBatch batch{in.curr, in.prev, in.gen, in.ref, in.advantages, in.offsets, 7, 2};
    std::vector<float> grad(in.curr.size());
    results.push_back(grpo_loss(config, batch, grad));
    std::vector<float> dlp(16, 0.0f);
    scatter_token_grads(r, 0, 2, 8, grad, dlp.data());
    for (size_t j : {8 + 1 + 2, 8 + 1 + 3}) EXPECT_EQ(dlp[j], 0.0f) << "row " << j << " predicts an observation";
    dlps.push_back(dlp);
  }
  EXPECT_EQ(results[0].loss, results[1].loss);
  EXPECT_EQ(results[0].sums.kl_penalty.sum, results[1].sums.kl_penalty.sum);
  EXPECT_EQ(results[0].sums.mismatch.token_mult_prob_error.sum, results[1].sums.mismatch.token_mult_prob_error.sum);
  EXPECT_EQ(results[0].sums.mismatch.token_mult_prob_error.count, 7);
  EXPECT_EQ(dlps[0], dlps[1]);
}

}  // namespace
}  // namespace fp8rl
