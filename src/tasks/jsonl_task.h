// A task read from JSONL files: one object per line with a prompt field and an answer field
// (names set by task.jsonl.prompt_key / answer_key, default "prompt" / "answer"; the answer may
// be a JSON number; blank lines are skipped). SFT trains on the whole answer text. The verifier
// extracts the response's final answer — the content of the last `\boxed{...}`, else the last
// number in it — and compares it with the reference's final answer (GSM8K style: what follows the
// last `####`; else its last `\boxed{...}`; else the whole trimmed reference): numerically when
// both parse as numbers (so "12", "12.0", "+12" match, and "1,234" matches "1234"), else as
// trimmed text.
//
// Bad files end with one Error naming the file and the line: unreadable file, not a regular file
// (a directory, a FIFO), a line longer than task.jsonl.max_line_bytes (refused as soon as that
// many bytes are read, before it is parsed), invalid JSON, a line that is not an object with
// string fields "prompt" and "answer", an empty split.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tasks/task.h"

namespace fp8rl {

struct JsonlTaskConfig {
  std::string train_path;       // task.jsonl.train_path
  std::string validation_path;  // task.jsonl.validation_path
  std::string prompt_key = "prompt";  // task.jsonl.prompt_key
  std::string answer_key = "answer";  // task.jsonl.answer_key
  int64_t max_line_bytes = int64_t{1} << 20;  // task.jsonl.max_line_bytes
};

// The final answer of a response: the last \boxed{...} (nested braces allowed), else the last
// number (-?digits with an optional fraction), else the trimmed response.
std::string extract_final_answer(std::string_view response);

// 1.0 if the final answer of `response` matches `reference` (see above), else 0.0.
double jsonl_reward(std::string_view reference, std::string_view response);

// The final answer of a reference answer (see above).
std::string reference_final_answer(std::string_view reference);

std::vector<Example> read_jsonl_examples(const std::string& path, const std::string& prompt_key = "prompt",
                                         const std::string& answer_key = "answer",
                                         int64_t max_line_bytes = JsonlTaskConfig{}.max_line_bytes);

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
