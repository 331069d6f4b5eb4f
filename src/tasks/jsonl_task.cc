#include "tasks/jsonl_task.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cctype>
#include <cstdlib>
#include <fstream>

#include "core/check.h"
#include "io/input_file.h"
#include "io/json_depth.h"

namespace fp8rl {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

bool is_digit(char c) { return std::isdigit(static_cast<unsigned char>(c)) != 0; }

// Parses the whole of `s` as a decimal number ("+12", "-3.50", "1,234"); false if it is not one.
// Thousands separators are dropped only between digits.
bool parse_number(std::string_view s, double* out) {
  const std::string_view trimmed = trim(s);
  std::string t;
  for (size_t i = 0; i < trimmed.size(); ++i) {
    const bool separator = trimmed[i] == ',' && i > 0 && i + 1 < trimmed.size() && is_digit(trimmed[i - 1]) &&
                           is_digit(trimmed[i + 1]);
    if (!separator) t += trimmed[i];
  }
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
    if (is_digit(c)) {
      --begin;
    } else if (c == ',' && !dot && begin >= 2 && is_digit(response[begin - 2]) && end - begin >= 3) {
      --begin;  // a thousands separator: "1,234"
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

std::string reference_final_answer(std::string_view reference) {
  const size_t hashes = reference.rfind("####");
  if (hashes != std::string_view::npos) return std::string(trim(reference.substr(hashes + 4)));
  if (reference.find("\\boxed{") != std::string_view::npos) return extract_final_answer(reference);
  return std::string(trim(reference));
}

double jsonl_reward(std::string_view reference, std::string_view response) {
  const std::string got = extract_final_answer(response);
  const std::string want = reference_final_answer(reference);
  double a = 0, b = 0;
  if (parse_number(got, &a) && parse_number(want, &b)) return a == b ? 1.0 : 0.0;
  return got == want ? 1.0 : 0.0;
}

std::vector<Example> read_jsonl_examples(const std::string& path, const std::string& prompt_key,
                                         const std::string& answer_key, int64_t max_line_bytes) {
  InputFile in(path, "dataset");
  std::vector<Example> out;
  std::string line;
  while (in.read_line(line, static_cast<uint64_t>(max_line_bytes), "task.jsonl.max_line_bytes")) {
    const int64_t number = in.line_number();
    if (trim(line).empty()) continue;
    nlohmann::json j;
    FP8RL_REQUIRE(json_nesting_depth(line) <= kMaxJsonDepth, "dataset '{}' line {}: nested deeper than {} levels", path,
                  number, kMaxJsonDepth);
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      throw Error(fmt::format("dataset '{}' line {}: not valid JSON ({})", path, number, e.what()));
    }
    const bool answer_ok = j.is_object() && j.contains(answer_key) && (j[answer_key].is_string() || j[answer_key].is_number());
    FP8RL_REQUIRE(j.is_object() && j.contains(prompt_key) && j[prompt_key].is_string() && answer_ok,
                "dataset '{}' line {}: expected an object with a string field \"{}\" and a string or number field "
                "\"{}\", got {}",
                path, number, prompt_key, answer_key, line.size() > 120 ? line.substr(0, 120) + "..." : line);
    const nlohmann::json& a = j[answer_key];
    out.push_back({j[prompt_key].get<std::string>(), a.is_string() ? a.get<std::string>() : a.dump(), line});
  }
  FP8RL_REQUIRE(!out.empty(), "dataset '{}': no examples", path);
  return out;
}

JsonlTask::JsonlTask(const JsonlTaskConfig& config)
    : train_(read_jsonl_examples(config.train_path, config.prompt_key, config.answer_key, config.max_line_bytes)),
      validation_(read_jsonl_examples(config.validation_path, config.prompt_key, config.answer_key, config.max_line_bytes)) {}

}  // namespace fp8rl
