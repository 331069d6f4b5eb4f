#include "tasks/running_sum.h"

#include <fmt/format.h>

#include "core/check.h"
#include "core/rng.h"
#include "io/config.h"
#include "tasks/task_splits.h"

namespace fp8rl {
namespace {

void check_term_count(const std::vector<int64_t>& terms, std::string_view what) {
  FP8RL_CHECK(terms.size() >= 2 && terms.size() <= kRunningSumKeys.size(), "{}: {} terms (2..{})", what, terms.size(),
              kRunningSumKeys.size());
}

Example draw_example(RandomStream& rng, const RunningSumTaskConfig& c) {
  const int terms =
      c.min_terms + static_cast<int>(rng.next_below(static_cast<uint32_t>(c.max_terms - c.min_terms + 1)));
  uint32_t bound = 1;
  for (int d = 0; d < c.term_digits; ++d) bound *= 10;
  std::vector<int64_t> values(static_cast<size_t>(terms));
  for (int64_t& value : values) value = rng.next_below(bound);
  return Example{running_sum_prompt(values), running_sum_answer(values, c.calculator), {}};
}

[[noreturn]] void config_error(std::string_view message) {
  throw Error(fmt::format("running_sum task config: {}", message));
}

// The leading digits of `s`.
std::string_view leading_digits(std::string_view s) {
  size_t end = 0;
  while (end < s.size() && s[end] >= '0' && s[end] <= '9') ++end;
  return s.substr(0, end);
}

}  // namespace

void bind_running_sum_task_config(ConfigSchema& schema, const std::string& prefix, RunningSumTaskConfig& config) {
  const RunningSumTaskConfig d;
  schema.add(prefix + ".min_terms", &config.min_terms, d.min_terms, "fewest numbers to add")
      .range(2, kRunningSumMaxTerms);
  schema.add(prefix + ".max_terms", &config.max_terms, d.max_terms, "most numbers to add (the answer-length dial)")
      .range(2, kRunningSumMaxTerms);
  schema.add(prefix + ".term_digits", &config.term_digits, d.term_digits, "digits of each number, at most").range(1, 4);
  schema.add(prefix + ".seed", &config.seed, d.seed, "seed of the train and validation splits");
  schema.add(prefix + ".train_size", &config.train_size, d.train_size, "train prompts").at_least(1);
  schema.add(prefix + ".val_size", &config.val_size, d.val_size, "validation prompts (distinct)").at_least(1);
  schema.add(prefix + ".calculator", &config.calculator, d.calculator,
             "answers call a calculator at each step: 0+a12=calc(0+12)=12 ... (the tool-use example)");
}

std::string running_sum_prompt(const std::vector<int64_t>& terms) {
  check_term_count(terms, "running_sum_prompt");
  std::string prompt;
  for (size_t i = 0; i < terms.size(); ++i) prompt += fmt::format("{}{}{}", i ? "+" : "", kRunningSumKeys[i], terms[i]);
  return prompt + "=";
}

std::string running_sum_answer(const std::vector<int64_t>& terms, bool calculator) {
  check_term_count(terms, "running_sum_answer");
  std::string answer;
  int64_t total = 0;
  for (size_t i = 0; i < terms.size(); ++i) {
    const std::string call = calculator ? fmt::format("calc({}+{})=", total, terms[i]) : "";
    answer += fmt::format("{}+{}{}={}{} ", total, kRunningSumKeys[i], terms[i], call, total + terms[i]);
    total += terms[i];
  }
  return answer + fmt::format("#{}", total);
}

double running_sum_reward(const Example& example, std::string_view response) {
  const size_t expected_at = example.answer.rfind('#');
  const size_t at = response.rfind('#');
  if (expected_at == std::string::npos || at == std::string_view::npos) return 0.0;
  const std::string_view expected = std::string_view(example.answer).substr(expected_at + 1);
  const std::string_view got = leading_digits(response.substr(at + 1));
  return !got.empty() && got == expected ? 1.0 : 0.0;
}

RunningSumTask::RunningSumTask(const RunningSumTaskConfig& c) {
  if (c.min_terms < 2 || c.max_terms > kRunningSumMaxTerms || c.min_terms > c.max_terms)
    config_error(
        fmt::format("terms must satisfy 2 <= min_terms <= max_terms <= {} (one key a..z, A..Z per term), got "
                    "min {} and max {}",
                    kRunningSumMaxTerms, c.min_terms, c.max_terms));
  if (c.term_digits < 1 || c.term_digits > 4) config_error(fmt::format("term_digits {} is not in 1..4", c.term_digits));
  if (c.train_size < 0 || c.val_size < 0)
    config_error(fmt::format("train_size ({}) and val_size ({}) must be >= 0", c.train_size, c.val_size));
  TaskSplits splits = draw_task_splits(
      c.seed, c.train_size, c.val_size, [&c](RandomStream& rng) { return draw_example(rng, c); },
      "running_sum task config");
  train_ = std::move(splits.train);
  validation_ = std::move(splits.validation);
}

}  // namespace fp8rl
