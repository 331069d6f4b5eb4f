// A GRPO rollout and how the trainer reads it: the right-padded batch its forwards run on, and
// the per-token inputs of the loss. A multi-turn rollout's response holds observation tokens
// (an environment's, rl/multi_turn.h): the trainer reads them as context and predicts none of
// them, so they have no log-prob, loss, KL, importance ratio or mismatch term, and no gradient.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "tasks/task.h"

namespace fp8rl {

// One rollout: prompt p's sample g, with everything the trainer needs.
struct Rollout {
  const Example* example = nullptr;
  std::vector<int32_t> prompt;        // bos + prompt tokens
  std::vector<int32_t> response;      // generated tokens (eos included when generated), and observations
  std::vector<uint8_t> observation;   // [response tokens] 1: an environment's; empty: none (single-turn)
  std::vector<float> gen, prev, ref;  // [response tokens] (observations: placeholders, never read)
  float reward = 0, advantage = 0;
  std::vector<uint16_t> routing;  // MoE models: the generator's experts (GeneratedSequence::routing)
};

inline bool is_observation(const Rollout& r, size_t j) { return !r.observation.empty() && r.observation[j] != 0; }

// The tokens of `r` the loss counts: the model's own.
int64_t model_tokens(const Rollout& r);

// Right-padded trainer batch of rollouts [begin, end): targets are the response's model tokens
// (observations: none). With `replay_width` (MoE layers x k, policy.router_replay) the batch
// replays the generator's experts at every position it read (the last token and padding take the
// router's own choice).
TokenBatch rollout_batch(const std::vector<Rollout>& r, size_t begin, size_t end, int32_t pad, int64_t replay_width);

// The loss's inputs for rollouts [m0, m1), model tokens only, in rollout then token order.
struct LossInputs {
  std::vector<float> curr, prev, gen, ref;  // [model tokens]; ref empty without a reference policy
  std::vector<float> advantages;            // [rollouts]
  std::vector<int64_t> offsets;             // [rollouts + 1] each rollout's first token in curr
};
// `lp` [B*T]: the trainer's log-probs of rollout_batch(r, m0, m1, ...). With `prev_from_lp`, each
// rollout's prev is set from `lp` first (a single optimizer step per GRPO step: the training
// forward's log-probs are prev bit for bit).
LossInputs loss_inputs(std::vector<Rollout>& r, size_t m0, size_t m1, const float* lp, int64_t T, bool prev_from_lp,
                       bool with_reference);
// dlogprob [B*T] of rollout_batch's layout from the loss gradient `grad` [model tokens] of
// loss_inputs' order (rows that are not model tokens are left as they are: zero).
void scatter_token_grads(const std::vector<Rollout>& r, size_t m0, size_t m1, int64_t T, const std::vector<float>& grad,
                         float* dlogprob);

}  // namespace fp8rl
