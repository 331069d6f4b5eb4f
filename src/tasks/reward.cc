#include "tasks/reward.h"

#include "core/check.h"
#include "io/config.h"
#include "tasks/python_sandbox.h"
#include "tasks/reward_plugin.h"

namespace fp8rl {

namespace {

class BuiltinReward final : public RewardFunction {
 public:
  explicit BuiltinReward(const Task& task) : task_(task) {}
  std::vector<RewardResult> score(const std::vector<RewardRequest>& requests) override {
    std::vector<RewardResult> out;
    out.reserve(requests.size());
    for (const RewardRequest& r : requests) out.push_back({task_.reward(*r.example, r.response), {}, false});
    return out;
  }

 private:
  const Task& task_;
};

}  // namespace

std::unique_ptr<RewardFunction> make_builtin_reward(const Task& task) { return std::make_unique<BuiltinReward>(task); }

void bind_reward_config(ConfigSchema& schema, const std::string& prefix, RewardConfig& config) {
  const RewardConfig d;
  bind_plugin_config(schema, prefix, config,
                     "a reward plug-in: its program and arguments, e.g. [python3, my_reward.py] (JSON Lines on "
                     "stdin/stdout; docs/tasks.md); empty: task.reward.builtin",
                     "worker processes of the plug-in, or sandboxes at once for python_tests (per rank)");
  schema.add_enum(prefix + ".builtin", &config.builtin, d.builtin,
                  {{"verifier", BuiltinRewardKind::kVerifier}, {"python_tests", BuiltinRewardKind::kPythonTests}},
                  "the reward without a command: verifier (the task's own), python_tests (the example's tests against "
                  "the response's Python, in the sandbox; task.sandbox.*)");
  schema.add_enum(prefix + ".on_timeout", &config.zero_on_timeout, d.zero_on_timeout, {{"error", false}, {"zero", true}},
                  "a reply later than timeout_s: error (stop the run) or zero (reward 0, counted in reward_timeouts)");
}

std::unique_ptr<RewardFunction> make_reward_function(const RewardConfig& config, const SandboxLimits& sandbox,
                                                     const Task& task, int rank) {
  if (config.command.empty() && config.builtin == BuiltinRewardKind::kPythonTests)
    return make_python_tests_reward(sandbox, config.workers);
  if (config.command.empty()) return make_builtin_reward(task);
  WorkerPoolOptions o = plugin_pool_options(config, "task.reward", "reward worker", rank);
  o.restart_on_timeout = config.zero_on_timeout;
  return make_plugin_reward(o);
}

nlohmann::json example_data(const Example& example) {
  if (example.data.empty()) return {{"prompt", example.prompt}, {"answer", example.answer}};
  nlohmann::json j = nlohmann::json::parse(example.data, nullptr, /*allow_exceptions=*/false);
  FP8RL_CHECK(j.is_object(), "an example's data is not a JSON object: {}", example.data.substr(0, 120));
  return j;
}

}  // namespace fp8rl
