// The built-in arithmetic task: "123+456=" -> "579".
//
// An operand with d digits is drawn by first drawing d uniformly from
// [min_operand_digits, max_operand_digits] and then the operand uniformly among the numbers with
// exactly d digits (0..9 for d = 1), so short operands are not swamped by long ones. The operator
// is uniform over `operators`. Answers are exact integers in decimal, with a leading '-' when
// negative (subtraction); products of two 9-digit operands still fit in int64.
//
// Splits are deterministic functions of the config, drawn from separate Philox streams of `seed`:
//   * validation: `val_size` distinct prompts (stream 1), drawn first, so the validation split
//     does not change when train_size changes;
//   * train: `train_size` prompts (stream 2) with every validation prompt rejected, so the splits
//     are disjoint; train may repeat a prompt (small problem spaces), and a longer train split
//     starts with the shorter one.
// The config is rejected if the validation split would need more than half of all possible
// prompts (the train split must have room).
//
// Reward rule (`arithmetic_reward`): the response's answer is its longest prefix of the form
// `-?[0-9]*`; the reward is 1 if that prefix equals the reference answer exactly, else 0. So
// "579" and "579 because..." score 1; "0579", " 579", "+579", "57", "5790" and "" score 0. The
// response is the generated text before <eos>, so a model that stops right after the answer and
// one that runs on after a non-digit are both judged by the answer it wrote first.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.h"

namespace fp8rl {

class ConfigSchema;

struct ArithmeticTaskConfig {
  int min_operand_digits = 1;   // 1..9
  int max_operand_digits = 3;   // min..9
  std::string operators = "+-*";  // a non-empty subset of "+-*", each at most once
  uint64_t seed = 1;
  int64_t train_size = 20000;
  int64_t val_size = 500;
};

// Registers the fields under `prefix` (e.g. "task.arithmetic": "task.arithmetic.min_operand_digits",
// ...), with the single-field checks; the constructor checks the rest (min <= max, space size).
void bind_arithmetic_task_config(ConfigSchema& schema, const std::string& prefix, ArithmeticTaskConfig& config);

// The exact answer of `a op b` in decimal ("-12" for 3-15). op is '+', '-' or '*'.
std::string arithmetic_answer(int64_t a, char op, int64_t b);

// 1.0 if the response's leading `-?[0-9]*` equals example.answer exactly, else 0.0 (see above).
double arithmetic_reward(const Example& example, std::string_view response);

class ArithmeticTask final : public Task {
 public:
  // Throws Error naming the field for an invalid config.
  explicit ArithmeticTask(const ArithmeticTaskConfig& config);

  std::string_view name() const override { return "arithmetic"; }
  const std::vector<Example>& train() const override { return train_; }
  const std::vector<Example>& validation() const override { return validation_; }
  double reward(const Example& example, std::string_view response) const override {
    return arithmetic_reward(example, response);
  }
  const ArithmeticTaskConfig& config() const { return config_; }
  // How many distinct prompts the config can produce.
  uint64_t num_possible_prompts() const;

 private:
  ArithmeticTaskConfig config_;
  std::vector<Example> train_;
  std::vector<Example> validation_;
};

}  // namespace fp8rl
