// A reward function in any language: `task.reward.command` is started as `task.reward.workers`
// long-lived worker processes (tasks/worker_pool.h) that answer JSON Lines.
//
//   request: {"id": "step3/p7/g2", "prompt": "...", "response": "...", "data": {every field of the example}}
//   reply:   {"id": "step3/p7/g2", "reward": 0.75, "metrics": {"format": 1.0}}
//
// A batch's request i goes to worker i % workers; replies come in any order. "reward" must be a
// finite number; "metrics", optional, an object of finite numbers (at most 64). Anything else is
// an Error naming the worker, the request and the tail of its stderr. A reply slower than
// task.reward.timeout_s is an Error too, or with task.reward.on_timeout: zero a reward of 0 with
// RewardResult::timed_out set (metrics.jsonl's reward_timeouts).
#pragma once

#include <memory>

#include "tasks/reward.h"
#include "tasks/worker_pool.h"

namespace fp8rl {

std::unique_ptr<RewardFunction> make_plugin_reward(const WorkerPoolOptions& options);

// Checks a reward reply's fields; throws through pool.fail for a bad one.
RewardResult parse_reward_reply(WorkerPool& pool, const WorkerReply& reply);

}  // namespace fp8rl
