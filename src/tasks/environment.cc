#include "tasks/environment.h"

#include <cmath>
#include <unordered_map>

#include "core/check.h"
#include "io/config.h"
#include "tasks/python_sandbox.h"
#include "tasks/reward.h"

namespace fp8rl {

namespace {

class EnvironmentPlugin final : public Environment {
 public:
  EnvironmentPlugin(const WorkerPoolOptions& options) : pool_(options) {}

  void submit(const std::string& id, int64_t route, int64_t turn, const Example& example,
              const std::string& transcript) override {
    pool_.submit(route, {{"id", id},
                         {"turn", turn},
                         {"prompt", example.prompt},
                         {"transcript", transcript},
                         {"data", example_data(example)}});
  }

  std::vector<EnvironmentReply> poll(bool wait) override {
    std::vector<EnvironmentReply> out;
    // A timeout is an error here (no on_timeout: an environment's turn has no neutral answer).
    for (const WorkerReply& r : pool_.poll(wait ? pool_.options().timeout_s : 0.0)) {
      worker_of_[r.id] = r.worker;
      const nlohmann::json& j = r.body;
      EnvironmentReply e{r.id, false, std::nullopt, ""};
      if (j.contains("done")) {
        if (!j["done"].is_boolean())
          pool_.fail(r.worker, r.id, fmt::format("\"done\" must be true or false, got {}", j["done"].dump()));
        e.done = j["done"].get<bool>();
      }
      if (e.done) {
        if (j.contains("reward")) {
          if (!j["reward"].is_number() || !std::isfinite(j["reward"].get<double>()))
            pool_.fail(r.worker, r.id, fmt::format("the reply's \"reward\" must be a finite number, got {}", j["reward"].dump()));
          e.reward = j["reward"].get<double>();
        }
      } else {
        if (!j.contains("observation") || !j["observation"].is_string())
          pool_.fail(r.worker, r.id,
                     fmt::format("the reply needs a string \"observation\" or \"done\": true, got {}",
                                 j.dump().substr(0, 200)));
        e.observation = j["observation"].get<std::string>();
      }
      out.push_back(std::move(e));
    }
    return out;
  }

  void reject(const std::string& id, const std::string& what) override {
    const auto it = worker_of_.find(id);
    pool_.fail(it == worker_of_.end() ? 0 : it->second, id, what);
  }

 private:
  WorkerPool pool_;
  std::unordered_map<std::string, int64_t> worker_of_;  // replies' workers, for reject
};

}  // namespace

void bind_environment_config(ConfigSchema& schema, const std::string& prefix, EnvironmentConfig& config) {
  const EnvironmentConfig d;
  bind_plugin_config(schema, prefix, config,
                     "a multi-turn environment plug-in: its program and arguments (JSON Lines, one request per turn; "
                     "docs/tasks.md); empty: task.environment.builtin",
                     "worker processes of the environment, or sandboxes at once for the python tool (per rank)");
  schema.add_enum(prefix + ".builtin", &config.python_tool, d.python_tool, {{"none", false}, {"python", true}},
                  "without a command: none (single-turn), or python (<python>CODE</python> at the end of a turn runs "
                  "in the sandbox and its output is the observation)");
  schema.add(prefix + ".max_turns", &config.max_turns, d.max_turns,
             "environment answers per sample (an observation after the last one ends the sample)").range(1, 1000);
  schema.add(prefix + ".stop", &config.stop, d.stop,
             "text that ends a model turn besides eos, e.g. [\")\"] for calls like calc(12+7)");
}

std::unique_ptr<Environment> make_environment(const EnvironmentConfig& config, const SandboxLimits& sandbox, int rank) {
  FP8RL_CHECK(config.enabled(), "make_environment without task.environment.command or builtin");
  FP8RL_REQUIRE(config.command.empty() || !config.python_tool,
                "task.environment: a command and builtin: python are both set; keep one");
  if (config.python_tool) return make_python_tool_environment(sandbox, config.workers);
  return std::make_unique<EnvironmentPlugin>(plugin_pool_options(config, "task.environment", "environment worker", rank));
}

}  // namespace fp8rl
