#include "rl/advantages.h"

#include <cmath>

#include "core/check.h"

namespace fp8rl {

void compute_advantages(std::span<const float> rewards, int64_t group_size, const AdvantageConfig& config,
                        std::span<float> advantages) {
  const int64_t n = static_cast<int64_t>(rewards.size());
  FP8RL_CHECK(group_size >= 1, "compute_advantages: group_size (grpo.num_generations_per_prompt) must be >= 1, got {}",
              group_size);
  FP8RL_CHECK(n % group_size == 0,
              "compute_advantages: {} rewards do not split into groups of {} (grpo.num_generations_per_prompt); "
              "the rollout must hold whole groups",
              n, group_size);
  FP8RL_CHECK(advantages.size() == rewards.size(), "compute_advantages: {} rewards but an output of {} advantages", n,
              advantages.size());
  for (int64_t i = 0; i < n; ++i)
    FP8RL_CHECK(std::isfinite(rewards[i]), "compute_advantages: reward {} (group {}, response {}) is {}", i,
                i / group_size, i % group_size, rewards[i]);

  const int64_t G = group_size;
  for (int64_t g0 = 0; g0 < n; g0 += G) {
    const float* r = rewards.data() + g0;
    float* a = advantages.data() + g0;
    bool all_equal = true;
    for (int64_t j = 1; j < G; ++j) all_equal = all_equal && r[j] == r[0];
    if (G == 1 || all_equal) {  // no relative signal (see the header)
      for (int64_t i = 0; i < G; ++i) a[i] = 0.0f;
      continue;
    }
    for (int64_t i = 0; i < G; ++i) {
      // Baseline set O_i: the other G-1 rewards, or the whole group.
      const bool loo = config.use_leave_one_out_baseline;
      const double count = static_cast<double>(loo ? G - 1 : G);
      double sum = 0;
      for (int64_t j = 0; j < G; ++j)
        if (!loo || j != i) sum += r[j];
      const double baseline = sum / count;  // b_i = mean(O_i)
      double adv = static_cast<double>(r[i]) - baseline;
      if (config.normalize_rewards) {
        // Are the values of O_i all equal (std exactly 0)? Tested on the values, not on a computed
        // std that rounding can leave at 1e-17.
        const int64_t first = (loo && i == 0) ? 1 : 0;
        bool set_constant = true;
        for (int64_t j = 0; j < G; ++j)
          if ((!loo || j != i) && r[j] != r[first]) set_constant = false;
        if (!set_constant) {
          // Population std of O_i, two-pass: sqrt(sum_j (r_j - b_i)^2 / |O_i|).
          double ss = 0;
          for (int64_t j = 0; j < G; ++j)
            if (!loo || j != i) ss += (r[j] - baseline) * (r[j] - baseline);
          adv /= std::sqrt(ss / count) + kAdvantageStdEpsilon;
        }
        // else: keep r_i - b_i unnormalised (NeMo RL's std > 0 mask), never divide by 1e-6 alone.
      }
      a[i] = static_cast<float>(adv);
    }
  }
}

std::vector<float> compute_advantages(std::span<const float> rewards, int64_t group_size,
                                      const AdvantageConfig& config) {
  std::vector<float> out(rewards.size());
  compute_advantages(rewards, group_size, config, out);
  return out;
}

}  // namespace fp8rl
