#include "tasks/jsonl_task.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/check.h"

namespace fp8rl {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Parses the whole of `s` as a decimal number ("+12", "-3.50"); false if it is not one.
bool parse_number(std::string_view s, double* out) {
  const std::string t(trim(s));
  if (t.empty()) return false;
  char* end = nullptr;
  *out = std::strtod(t.c_str(), &end);
  return end == t.c_str() + t.size() && (std::isdigit(static_cast<unsigned char>(t.back())) != 0);
}

}  // namespace

std::string extract_final_answer(std::string_view response) {
  // Last \boxed{...}, with balanced braces inside.
  const size_t boxed = response.rfind("\\boxed{");
  if (boxed != std::string_view::npos) {
    size_t i = boxed + 7;
    int depth = 1;
    const size_t start = i;
    for (; i < response.size() && depth > 0; ++i) depth += response[i] == '{' ? 1 : response[i] == '}' ? -1 : 0;
    if (depth == 0) return std::string(trim(response.substr(start, i - 1 - start)));
  }
  // Last number: scan backwards for a digit, then extend over digits, one '.', and a sign.
  size_t end = response.size();
  while (end > 0 && !std::isdigit(static_cast<unsigned char>(response[end - 1]))) --end;
  if (end == 0) return std::string(trim(response));
  size_t begin = end;
  bool dot = false;
  while (begin > 0) {
    const char c = response[begin - 1];
    if (std::isdigit(static_cast<unsigned char>(c))) {
      --begin;
    } else if (c == '.' && !dot && begin >= 2 && std::isdigit(static_cast<unsigned char>(response[begin - 2]))) {
      dot = true;
      --begin;
    } else {
      break;
    }
  }
  if (begin > 0 && response[begin - 1] == '-') --begin;
  return std::string(response.substr(begin, end - begin));
}

double jsonl_reward(std::string_view reference, std::string_view response) {
  const std::string got = extract_final_answer(response);
  const std::string_view want = trim(reference);
  double a = 0, b = 0;
  if (parse_number(got, &a) && parse_number(want, &b)) return a == b ? 1.0 : 0.0;
  return got == want ? 1.0 : 0.0;
}

std::vector<Example> read_jsonl_examples(const std::string& path) {
  std::ifstream in(path);
  FP8RL_CHECK(in.good(), "dataset '{}': cannot open the file", path);
  std::vector<Example> out;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (trim(line).empty()) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("dataset '{}' line {}: not valid JSON ({})", path, number, e.what()));
    }
    FP8RL_CHECK(j.is_object() && j.contains("prompt") && j["prompt"].is_string() && j.contains("answer") &&
                    j["answer"].is_string(),
                "dataset '{}' line {}: expected an object with string fields \"prompt\" and \"answer\", got {}", path,
                number, line.size() > 120 ? line.substr(0, 120) + "..." : line);
    out.push_back({j["prompt"].get<std::string>(), j["answer"].get<std::string>()});
  }
  FP8RL_CHECK(!out.empty(), "dataset '{}': no examples", path);
  return out;
}

JsonlTask::JsonlTask(const JsonlTaskConfig& config)
    : train_(read_jsonl_examples(config.train_path)), validation_(read_jsonl_examples(config.validation_path)) {}

}  // namespace fp8rl
