// Group-relative advantages of GRPO (docs/recipe.md section 7).
//
// The rollout holds G responses per prompt, stored consecutively: the rewards of group g are
// rewards[g*G .. g*G + G). Every response gets one scalar advantage, which the loss broadcasts to
// all of its tokens.
//
// For response i of a group with rewards r_0 .. r_{G-1}:
//
//   baseline set   O_i = { r_j : j != i }   (use_leave_one_out_baseline)
//                  O_i = { r_j : all j }    (otherwise: the plain group mean)
//   baseline       b_i = mean(O_i)
//   advantage      A_i = r_i - b_i
//   normalised     A_i = (r_i - b_i) / (std(O_i) + 1e-6)            (normalize_rewards)
//
// with these rules, in this order:
//   * G == 1: A = 0. A leave-one-out baseline has no other response to average, and the plain
//     mean equals the reward itself; either way a single response carries no relative signal.
//   * All G rewards exactly equal: A = 0 for the whole group (no relative signal; computed
//     exactly, not as a difference that rounding could make 1e-17).
//   * std is the POPULATION standard deviation of O_i (divide by |O_i|, not |O_i| - 1): it is
//     defined for a single other reward (G = 2), and it is what NeMo RL computes
//     (E[x^2] - E[x]^2 over the same set), so normalised advantages match NeMo RL's. We compute
//     it in two passes in double, which does not cancel catastrophically.
//   * If the values of O_i are all exactly equal although r_i differs (leave-one-out only, e.g.
//     binary rewards {1, 0, 0, 0} for the lone correct response), std(O_i) = 0 and dividing by
//     1e-6 would scale that advantage by 10^6. As in NeMo RL (its `std > 0` mask), such a response
//     keeps the unnormalised A_i = r_i - b_i. With G = 2 and leave-one-out this is every
//     response: A = r_i - r_j.
//
// Arithmetic is in double; the results are rounded to float once.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace fp8rl {

struct AdvantageConfig {
  bool use_leave_one_out_baseline = true;  // grpo.use_leave_one_out_baseline
  bool normalize_rewards = true;           // grpo.normalize_rewards
};

// Added to the standard deviation before dividing (recipe section 7).
inline constexpr double kAdvantageStdEpsilon = 1e-6;

// rewards:    [num_groups * group_size], finite; group g = rewards[g*G, (g+1)*G)
// advantages: [num_groups * group_size] (written)
// Throws fp8rl::Error if group_size < 1, group_size does not divide the reward count, the sizes
// differ, or a reward is not finite.
void compute_advantages(std::span<const float> rewards, int64_t group_size, const AdvantageConfig& config,
                        std::span<float> advantages);
std::vector<float> compute_advantages(std::span<const float> rewards, int64_t group_size,
                                      const AdvantageConfig& config);

}  // namespace fp8rl
