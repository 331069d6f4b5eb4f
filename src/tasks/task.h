// What every task (built-in arithmetic, JSONL datasets) provides to SFT, evaluation and the RL
// loop: fixed train and validation splits of (prompt, answer) examples and a verifier.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace fp8rl {

// One problem. `prompt` is the text the model is conditioned on (e.g. "123+456="); `answer` is
// the exact reference answer (e.g. "579"), which SFT trains on (followed by <eos>) and the
// verifier compares against. `data` is every field of the example as a JSON object's text (a
// JSONL line as read, so a reward plug-in sees fields such as tests or metadata); empty for the
// built-in tasks, whose fields are the prompt and the answer (example_data gives them).
struct Example {
  std::string prompt;
  std::string answer;
  std::string data;
};

class Task {
 public:
  virtual ~Task() = default;

  virtual std::string_view name() const = 0;
  virtual const std::vector<Example>& train() const = 0;
  virtual const std::vector<Example>& validation() const = 0;
  // The reward in [0, 1] of `response`: the text generated after the prompt, up to but not
  // including the first <eos> (CharTokenizer::decode_response gives exactly this).
  virtual double reward(const Example& example, std::string_view response) const = 0;
};

}  // namespace fp8rl
