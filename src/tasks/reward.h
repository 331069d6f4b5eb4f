// Where rewards come from: the task's built-in verifier (the default), a reward plug-in in any
// language (tasks/reward_plugin.h), or the sandboxed unit tests of model-written Python
// (tasks/python_tests.h). The RL loop, SFT's validation and `fp8rl eval` score a batch of
// responses at a time through this one interface and never see a process.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tasks/task.h"
#include "tasks/worker_pool.h"

namespace fp8rl {

class ConfigSchema;
struct SandboxLimits;

// task.reward.builtin: what scores responses when no command is given.
enum class BuiltinRewardKind : uint8_t {
  kVerifier,     // the task's own verifier (Task::reward)
  kPythonTests,  // the example's unit tests run against the response's Python, in the sandbox
};

// task.reward.*: the reward plug-in (PluginConfig's command; empty: the built-in scorer).
struct RewardConfig : PluginConfig {
  BuiltinRewardKind builtin = BuiltinRewardKind::kVerifier;  // task.reward.builtin
  bool zero_on_timeout = false;                              // task.reward.on_timeout: error | zero
};
void bind_reward_config(ConfigSchema& schema, const std::string& prefix, RewardConfig& config);

struct RewardRequest {
  std::string id;  // unique among a batch's requests, e.g. "step3/p7/g2"; named by errors
  const Example* example = nullptr;
  std::string response;  // the generated text (Tokenizer::decode_response)
};

struct RewardResult {
  double reward = 0;  // finite
  // Named figures of this response (a plug-in reply's "metrics"), averaged per step into
  // metrics.jsonl's reward_metrics.NAME over the responses that report them.
  std::vector<std::pair<std::string, double>> metrics;
  bool timed_out = false;  // a plug-in's reply came too late; reward is 0 (task.reward.on_timeout: zero)
};

class RewardFunction {
 public:
  virtual ~RewardFunction() = default;
  // One result per request, in request order. Throws Error for what must stop the run.
  virtual std::vector<RewardResult> score(const std::vector<RewardRequest>& requests) = 0;
};

// The task's own verifier (Task::reward).
std::unique_ptr<RewardFunction> make_builtin_reward(const Task& task);

// The reward function `config` describes for `task`; a plug-in's workers start now (and tell
// their rank by FP8RL_RANK); python_tests checks its sandbox now.
std::unique_ptr<RewardFunction> make_reward_function(const RewardConfig& config, const SandboxLimits& sandbox,
                                                     const Task& task, int rank = 0);

// Every field of `example` as a JSON object: its data, or {prompt, answer} for a built-in task.
nlohmann::json example_data(const Example& example);

}  // namespace fp8rl
