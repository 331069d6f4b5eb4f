// Multi-turn environments: between the model's turns, an environment looks at the sample so far
// and answers with an observation (a tool's output, say) that is appended to the sample as
// tokens the model did not generate, or ends the sample, optionally with its reward.
//
// A plug-in in any language (`task.environment.command`) is started as worker processes
// (tasks/worker_pool.h) that answer JSON Lines, one request per turn:
//
//   request: {"id": "step3/p7/g2/t1", "turn": 1, "prompt": "...", "transcript": "the sample's text so far",
//             "data": {every field of the example}}
//   reply:   {"id": "...", "observation": "text"}   or   {"id": "...", "done": true, "reward": 0.5}
//
// "reward" is optional: without it the sample is scored by task.reward as any other. A model turn
// ends at eos or at a task.environment.stop string; a sample has at most
// task.environment.max_turns turns (an observation after the last one ends it) and all of it
// fits generation.max_new_tokens. The requests of one sample go to the same worker (its sequence
// number modulo the workers), so an environment may keep state per id prefix.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tasks/task.h"
#include "tasks/worker_pool.h"

namespace fp8rl {

class ConfigSchema;
struct SandboxLimits;

// task.environment.*: the plug-in (PluginConfig's command), or the built-in python tool.
struct EnvironmentConfig : PluginConfig {
  bool python_tool = false;          // task.environment.builtin: none | python (tasks/python_sandbox.h)
  int64_t max_turns = 4;             // environment answers per sample
  std::vector<std::string> stop;     // text that ends a model turn, besides eos

  bool enabled() const { return !command.empty() || python_tool; }
};
void bind_environment_config(ConfigSchema& schema, const std::string& prefix, EnvironmentConfig& config);

struct EnvironmentReply {
  std::string id;
  bool done = false;
  std::optional<double> reward;  // with done
  std::string observation;       // without done
};

class Environment {
 public:
  virtual ~Environment() = default;
  // Asks about one turn of a sample; `route` (the sample's sequence number) picks the worker.
  virtual void submit(const std::string& id, int64_t route, int64_t turn, const Example& example,
                      const std::string& transcript) = 0;
  // The replies that arrived (checked); with `wait`, at least one.
  virtual std::vector<EnvironmentReply> poll(bool wait) = 0;
  // Throws the Error for a reply that cannot be used (e.g. an observation the tokenizer rejects).
  [[noreturn]] virtual void reject(const std::string& id, const std::string& what) = 0;
};

// The environment `config` describes: the plug-in (its workers start now and tell their rank by
// FP8RL_RANK), or the built-in python tool (its sandbox checked now).
std::unique_ptr<Environment> make_environment(const EnvironmentConfig& config, const SandboxLimits& sandbox, int rank = 0);

}  // namespace fp8rl
