#include "tasks/arithmetic.h"

#include <fmt/format.h>


#include "core/check.h"
#include "core/rng.h"
#include "io/config.h"
#include "tasks/task_splits.h"

namespace fp8rl {
namespace {

uint64_t pow10(int d) {
  uint64_t p = 1;
  for (int i = 0; i < d; ++i) p *= 10;
  return p;
}

// Uniform among the numbers with exactly `digits` digits (0..9 for one digit).
int64_t draw_operand(RandomStream& rng, int digits) {
  if (digits == 1) return rng.next_below(10);
  const uint64_t lo = pow10(digits - 1);
  return static_cast<int64_t>(lo + rng.next_below(static_cast<uint32_t>(9 * lo)));
}

Example draw_example(RandomStream& rng, const ArithmeticTaskConfig& c) {
  const int span = c.max_operand_digits - c.min_operand_digits + 1;
  const char op = c.operators[rng.next_below(static_cast<uint32_t>(c.operators.size()))];
  const int64_t a = draw_operand(rng, c.min_operand_digits + static_cast<int>(rng.next_below(static_cast<uint32_t>(span))));
  const int64_t b = draw_operand(rng, c.min_operand_digits + static_cast<int>(rng.next_below(static_cast<uint32_t>(span))));
  return Example{fmt::format("{}{}{}=", a, op, b), arithmetic_answer(a, op, b), {}};
}

[[noreturn]] void config_error(std::string_view message) {
  throw Error(fmt::format("arithmetic task config: {}", message));
}

}  // namespace

void bind_arithmetic_task_config(ConfigSchema& schema, const std::string& prefix, ArithmeticTaskConfig& config) {
  const ArithmeticTaskConfig d;
  schema.add(prefix + ".min_operand_digits", &config.min_operand_digits, d.min_operand_digits,
             "fewest digits of an operand").range(1, 9);
  schema.add(prefix + ".max_operand_digits", &config.max_operand_digits, d.max_operand_digits,
             "most digits of an operand").range(1, 9);
  schema.add(prefix + ".operators", &config.operators, d.operators, "operators to draw from, a subset of \"+-*\"");
  schema.add(prefix + ".seed", &config.seed, d.seed, "seed of the train and validation splits");
  schema.add(prefix + ".train_size", &config.train_size, d.train_size, "train prompts").at_least(1);
  schema.add(prefix + ".val_size", &config.val_size, d.val_size, "validation prompts (distinct)").at_least(1);
}

std::string arithmetic_answer(int64_t a, char op, int64_t b) {
  switch (op) {
    case '+': return std::to_string(a + b);
    case '-': return std::to_string(a - b);
    case '*': return std::to_string(a * b);
  }
  FP8RL_REQUIRE(false, "unknown arithmetic operator '{}'", op);
  return "";
}

double arithmetic_reward(const Example& example, std::string_view response) {
  size_t end = 0;
  if (end < response.size() && response[end] == '-') ++end;
  while (end < response.size() && response[end] >= '0' && response[end] <= '9') ++end;
  return response.substr(0, end) == example.answer ? 1.0 : 0.0;
}

uint64_t ArithmeticTask::num_possible_prompts() const {
  const uint64_t operands =
      pow10(config_.max_operand_digits) - (config_.min_operand_digits == 1 ? 0 : pow10(config_.min_operand_digits - 1));
  return config_.operators.size() * operands * operands;  // <= 3 * 10^18: fits in uint64
}

ArithmeticTask::ArithmeticTask(const ArithmeticTaskConfig& config) : config_(config) {
  const auto& c = config_;
  if (c.min_operand_digits < 1 || c.max_operand_digits > 9 || c.min_operand_digits > c.max_operand_digits)
    config_error(fmt::format("operand digits must satisfy 1 <= min_operand_digits <= max_operand_digits <= 9, got min {} "
                             "and max {}",
                             c.min_operand_digits, c.max_operand_digits));
  if (c.operators.empty()) config_error("operators is empty; expected a subset of \"+-*\"");
  for (size_t i = 0; i < c.operators.size(); ++i) {
    const char op = c.operators[i];
    if (op != '+' && op != '-' && op != '*')
      config_error(fmt::format("operators \"{}\" contains '{}'; expected a subset of \"+-*\"", c.operators, op));
    if (c.operators.find(op) != i)
      config_error(fmt::format("operators \"{}\" lists '{}' twice", c.operators, op));
  }
  if (c.train_size < 0 || c.val_size < 0)
    config_error(fmt::format("train_size ({}) and val_size ({}) must be >= 0", c.train_size, c.val_size));
  const uint64_t possible = num_possible_prompts();
  if (static_cast<uint64_t>(c.val_size) > possible / 2)
    config_error(fmt::format("val_size {} needs more than half of the {} possible prompts; lower val_size or allow "
                             "more operand digits or operators",
                             c.val_size, possible));

  TaskSplits splits = draw_task_splits(
      c.seed, c.train_size, c.val_size, [&c](RandomStream& rng) { return draw_example(rng, c); },
      "arithmetic task config");
  train_ = std::move(splits.train);
  validation_ = std::move(splits.validation);
}

}  // namespace fp8rl
