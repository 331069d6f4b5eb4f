// A step's reward plug-in figures, the same on every rank: each named metric of the replies
// averaged over the responses that report it (summed in rollout order, so the same bits for any
// number of ranks), and how many replies timed out (task.reward.on_timeout: zero).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <vector>

#include "core/communicator.h"
#include "tasks/reward.h"

namespace fp8rl {

struct RewardMetrics {
  nlohmann::ordered_json means = nlohmann::ordered_json::object();  // name -> mean, names sorted
  int64_t timeouts = 0;
};

// `mine`: this rank's results, its rollouts in order; ranks hold consecutive shares in rank order.
RewardMetrics gather_reward_metrics(const dist::Communicator& comm, const std::vector<RewardResult>& mine);

}  // namespace fp8rl
