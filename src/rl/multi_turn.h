// The generator's turns answered by a task's environment (tasks/environment.h): the TurnHandler
// of one generate() call. It decides where a model turn ends (eos, or a task.environment.stop
// string at the end of the turn's text), sends the sample's transcript to the environment,
// encodes observations with the tokenizer (the model family's tool message), ends a sample after
// task.environment.max_turns answers, and keeps the rewards that environments give with "done".
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "generation/turn_handler.h"
#include "tasks/environment.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

class EnvironmentTurns final : public TurnHandler {
 public:
  // Sequence s of the generate() call is example `examples[s]`; its requests are named
  // "{id_prefix}/p{s / G}/g{s % G}/t{turn}" with `first_prompt` added to the prompt number.
  EnvironmentTurns(Environment& environment, const EnvironmentConfig& config, const Tokenizer& tokenizer,
                   std::vector<const Example*> examples, int64_t samples_per_prompt, std::string id_prefix,
                   int64_t first_prompt = 0);

  bool ends_turn(int64_t sequence, std::span<const int32_t> response, size_t turn_begin) override;
  void submit(int64_t sequence, std::span<const int32_t> response) override;
  std::vector<Answer> poll(bool wait) override;

  // The reward an environment gave sequence `s` when it ended it, if it gave one.
  const std::optional<double>& reward(int64_t s) const { return rewards_[static_cast<size_t>(s)]; }

 private:
  Environment& env_;
  const EnvironmentConfig& config_;
  const Tokenizer& tok_;
  std::vector<const Example*> examples_;
  int64_t G_, first_prompt_;
  std::string prefix_;
  std::vector<int64_t> turns_;                   // answers asked for, per sequence
  std::vector<uint8_t> after_eos_;               // the asked-about turn ended with eos
  std::vector<std::optional<double>> rewards_;
  std::vector<std::pair<std::string, int64_t>> outstanding_;  // request id -> sequence
};

}  // namespace fp8rl
