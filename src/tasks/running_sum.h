// The built-in long-answer task: add up a list of keyed numbers, writing out every addition.
//
//   prompt  "a12+b7+c30+d5="
//   answer  "0+a12=12 12+b7=19 19+c30=49 49+d5=54 #54"   (each step: the running total, '+', the
//                                                      next key and term, '=', the new total;
//                                                      then '#' and the sum)
//
// Each term carries a key (a..z, then A..Z), and each step writes the key before the term, so the
// next term is found by its key (the letter after the previous step's) rather than by counting
// places in the prompt's list; the step's operands stand right before its result, so the
// arithmetic is local. (Without keys, a 3.2 M-parameter model learned every addition but lost its
// place in the list; with them the lookup is possible by content, but still has to be learned:
// docs/results.md, "Long answers".) The response's length is the dial: K terms
// give K steps of about 2 * (term_digits + log10(K)) + 4 characters (tokens, with the character
// vocabulary), e.g. 12-24 one-digit terms answer in 100-230 tokens. K is drawn uniformly from
// [min_terms, max_terms] per example (at most 52, the number of keys), each term uniformly from
// [0, 10^term_digits). One wrong step is carried through every later total: the task rewards
// keeping a long computation exact, which is where a generator that rounds differently from its
// trainer can drift.
//
// Reward rule (`running_sum_reward`): 1 if the response holds a '#' and the leading digits after
// its last '#' equal the sum exactly, else 0. The working is not scored (only the final answer
// is verified), so a model may shorten it; the report shows the response length over training.
//
// With `calculator` (the tool-use example, docs/tasks.md), each step calls a calculator for its
// addition and the result follows the call, as a calculator environment's observation would:
//   answer  "0+a12=calc(0+12)=12 12+b7=calc(12+7)=19 #19"
// The reward rule is the same.
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

// The keys of the terms, in order: one per term, so at most 52 terms.
inline constexpr std::string_view kRunningSumKeys = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
inline constexpr int kRunningSumMaxTerms = static_cast<int>(kRunningSumKeys.size());

struct RunningSumTaskConfig {
  int min_terms = 8;    // 2..kRunningSumMaxTerms
  int max_terms = 16;   // min_terms..kRunningSumMaxTerms
  int term_digits = 2;  // 1..4
  uint64_t seed = 1;
  int64_t train_size = 20000;
  int64_t val_size = 200;
  bool calculator = false;  // the answers call calc(total+term) at each step
};

// Registers the fields under `prefix` (e.g. "task.running_sum"); the constructor checks min <= max.
void bind_running_sum_task_config(ConfigSchema& schema, const std::string& prefix, RunningSumTaskConfig& config);

// The prompt of the terms: "a12+b7+c30+d5=" (at most kRunningSumMaxTerms terms).
std::string running_sum_prompt(const std::vector<int64_t>& terms);

// The answer of the prompt's terms: "total+<key><term>=<new total> " for each term, starting from
// a total of 0, then "#" and the sum.
std::string running_sum_answer(const std::vector<int64_t>& terms, bool calculator = false);

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
