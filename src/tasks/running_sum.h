// The built-in long-answer task: add up a list of numbers, writing out every addition.
//
//   prompt  "12+7+30+5="
//   answer  "12+7=19 19+30=49 49+5=54 #54"   (each step: the running total, '+', the next term,
//                                           '=', the new total; then '#' and the sum)
//
// Each step's operands are written right before its result, so the arithmetic is local; what the
// model must keep is its place in the prompt's list. The response's length is the dial: K terms
// give K - 1 steps of about 2 * (term_digits + log10(K)) + 3 characters (tokens, with the
// character vocabulary), e.g. 12-24 one-digit terms answer in 80-220 tokens. K is drawn uniformly
// from [min_terms, max_terms] per example, each term uniformly from [0, 10^term_digits). One
// wrong step is carried through every later total: the task rewards keeping a long computation
// exact, which is where a generator that rounds differently from its trainer can drift.
//
// Reward rule (`running_sum_reward`): 1 if the response holds a '#' and the leading digits after
// its last '#' equal the sum exactly, else 0. The working is not scored (only the final answer
// is verified), so a model may shorten it; the report shows the response length over training.
//
// Splits are deterministic in the config, drawn from separate Philox streams of `seed` (1:
// validation, distinct prompts; 2: train, validation prompts rejected), as the arithmetic task's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.h"

namespace fp8rl {

class ConfigSchema;

struct RunningSumTaskConfig {
  int min_terms = 8;    // 2..400
  int max_terms = 16;   // min_terms..400
  int term_digits = 2;  // 1..4
  uint64_t seed = 1;
  int64_t train_size = 20000;
  int64_t val_size = 200;
};

// Registers the fields under `prefix` (e.g. "task.running_sum"); the constructor checks min <= max.
void bind_running_sum_task_config(ConfigSchema& schema, const std::string& prefix, RunningSumTaskConfig& config);

// The answer of the prompt's terms: "a+b=c " for each step, then "#" and the sum.
std::string running_sum_answer(const std::vector<int64_t>& terms);

// 1.0 if the leading digits after the response's last '#' equal the digits after the answer's '#'.
double running_sum_reward(const Example& example, std::string_view response);

class RunningSumTask final : public Task {
 public:
  // Throws Error naming the field for an invalid config.
  explicit RunningSumTask(const RunningSumTaskConfig& config);

  std::string_view name() const override { return "running_sum"; }
  const std::vector<Example>& train() const override { return train_; }
  const std::vector<Example>& validation() const override { return validation_; }
  double reward(const Example& example, std::string_view response) const override {
    return running_sum_reward(example, response);
  }

 private:
  std::vector<Example> train_;
  std::vector<Example> validation_;
};

}  // namespace fp8rl
