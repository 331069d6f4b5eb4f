// A JSONL dataset (src/tasks/jsonl_task.h): read_jsonl_examples on the input as a file, with the
// default field names and with "question" / "answer" (GSM8K's), then the verifier:
// extract_final_answer, reference_final_answer and jsonl_reward on slices of the input and on
// the examples read. Expected response to bad input: fp8rl::Error.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "fuzz_input_file.h"
#include "tasks/jsonl_task.h"

namespace {

void check_reward(std::string_view reference, std::string_view response) {
  const double r = fp8rl::jsonl_reward(reference, response);
  if (r != 0.0 && r != 1.0) {
    std::fprintf(stderr, "jsonl_reward returned %g (expected 0 or 1)\n", r);
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input = fp8rl::fuzz::as_text(data, size);
  const std::string path = fp8rl::fuzz::write_input_file("data.jsonl", input).string();
  for (const auto& [prompt_key, answer_key] : {std::pair{"prompt", "answer"}, std::pair{"question", "answer"}}) {
    try {
      const std::vector<fp8rl::Example> examples = fp8rl::read_jsonl_examples(path, prompt_key, answer_key);
      for (const fp8rl::Example& e : examples) {
        (void)fp8rl::reference_final_answer(e.answer);
        check_reward(e.answer, e.prompt);
        check_reward(e.answer, e.answer);
      }
    } catch (const fp8rl::Error&) {
    }
  }
  // The verifier on the raw bytes: the whole input, its halves, each as reference and response.
  const std::string_view first = input.substr(0, input.size() / 2), second = input.substr(input.size() / 2);
  (void)fp8rl::extract_final_answer(input);
  (void)fp8rl::extract_final_answer(first);
  (void)fp8rl::reference_final_answer(input);
  check_reward(first, second);
  check_reward(second, first);
  check_reward(input, input);
  return 0;
}
