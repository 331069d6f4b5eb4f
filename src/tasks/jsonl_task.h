// A task read from JSONL files: one `{"prompt": "...", "answer": "..."}` object per line
// (blank lines are skipped). The verifier extracts the response's final answer — the content of
// the last `\boxed{...}`, else the last number in it — and compares it with the reference answer:
// numerically when both parse as numbers (so "12", "12.0" and "+12" match), else as trimmed text.
//
// Bad files end with one Error naming the file and the line: unreadable file, invalid JSON, a
// line that is not an object with string fields "prompt" and "answer", an empty split.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.h"

namespace fp8rl {

struct JsonlTaskConfig {
  std::string train_path;       // task.jsonl.train_path
  std::string validation_path;  // task.jsonl.validation_path
};

// The final answer of a response: the last \boxed{...} (nested braces allowed), else the last
// number (-?digits with an optional fraction), else the trimmed response.
std::string extract_final_answer(std::string_view response);

// 1.0 if the final answer of `response` matches `reference` (see above), else 0.0.
double jsonl_reward(std::string_view reference, std::string_view response);

std::vector<Example> read_jsonl_examples(const std::string& path);

class JsonlTask final : public Task {
 public:
  explicit JsonlTask(const JsonlTaskConfig& config);
  std::string_view name() const override { return "jsonl"; }
  const std::vector<Example>& train() const override { return train_; }
  const std::vector<Example>& validation() const override { return validation_; }
  double reward(const Example& example, std::string_view response) const override {
    return jsonl_reward(example.answer, response);
  }

 private:
  std::vector<Example> train_, validation_;
};

}  // namespace fp8rl
