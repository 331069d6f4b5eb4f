#include "report/run_metrics.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/check.h"
#include "io/json_depth.h"

namespace fp8rl::report {

namespace fs = std::filesystem;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The first characters of a line, for a warning.
std::string excerpt(std::string_view line) {
  constexpr size_t kMax = 60;
  return line.size() > kMax ? fmt::format("{}...", line.substr(0, kMax)) : std::string(line);
}

bool is_blank(std::string_view line) {
  return std::all_of(line.begin(), line.end(), [](char c) { return c == ' ' || c == '\t' || c == '\r'; });
}

// Appends the numbers of `j` as (dotted name, value); null reads as NaN; other types are skipped.
void flatten_numbers(const nlohmann::ordered_json& j, const std::string& prefix,
                     std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [key, value] : j.items()) {
    const std::string name = prefix.empty() ? key : prefix + "." + key;
    if (value.is_number()) {
      out.emplace_back(name, value.get<double>());
    } else if (value.is_null()) {
      out.emplace_back(name, kNaN);
    } else if (value.is_object()) {
      flatten_numbers(value, name, out);
    }
  }
}

// Appends the scalars of a YAML tree as (dotted key, text); a sequence becomes "[a, b]".
void flatten_yaml(const YAML::Node& node, const std::string& prefix,
                  std::vector<std::pair<std::string, std::string>>& out) {
  if (node.IsMap()) {
    for (const auto& entry : node) {
      const std::string key = entry.first.as<std::string>();
      flatten_yaml(entry.second, prefix.empty() ? key : prefix + "." + key, out);
    }
  } else if (node.IsSequence()) {
    std::string text = "[";
    for (size_t i = 0; i < node.size(); ++i) text += (i ? ", " : "") + (node[i].IsScalar() ? node[i].Scalar() : "...");
    out.emplace_back(prefix, text + "]");
  } else {
    out.emplace_back(prefix, node.IsScalar() ? node.Scalar() : "null");
  }
}

void read_config(RunMetrics& run) {
  const fs::path path = run.dir / "config.yaml";
  std::ifstream in(path);
  if (!in.good()) {
    run.warnings.push_back(fmt::format("{}: missing; the run is grouped by its directory name", path.string()));
    return;
  }
  std::stringstream text;
  text << in.rdbuf();
  run.config_yaml = text.str();
  try {
    flatten_yaml(YAML::Load(run.config_yaml), "", run.config);
  } catch (const YAML::Exception& e) {
    run.warnings.push_back(fmt::format("{}:{}: not valid YAML ({}); the run is grouped by its directory name",
                                       path.string(), e.mark.line + 1, e.msg));
    run.config.clear();
  }
  std::sort(run.config.begin(), run.config.end());
}

}  // namespace

const std::vector<double>* RunMetrics::find(std::string_view metric) const {
  const auto it = series.find(std::string(metric));
  return it == series.end() ? nullptr : &it->second;
}

std::string RunMetrics::config_value(std::string_view key, std::string_view fallback) const {
  const auto it = std::lower_bound(config.begin(), config.end(), key,
                                   [](const auto& entry, std::string_view k) { return entry.first < k; });
  return it != config.end() && it->first == key ? it->second : std::string(fallback);
}

RunMetrics read_run_metrics(const fs::path& dir) {
  FP8RL_REQUIRE(fs::is_directory(dir),
              "report: run directory '{}' does not exist (expected a logger.log_dir of fp8rl train)", dir.string());
  RunMetrics run;
  run.dir = dir;
  run.name = (dir / "").parent_path().filename().string();
  const fs::path path = dir / "metrics.jsonl";
  std::ifstream in(path);
  FP8RL_REQUIRE(in.good(), "report: '{}' holds no metrics.jsonl: not a run directory, or its run has not finished a step",
              dir.string());

  // step -> (line number, its metrics); a later line of the same step replaces an earlier one.
  std::map<int64_t, std::pair<int64_t, std::vector<std::pair<std::string, double>>>> rows;
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (is_blank(line)) continue;
    const std::string where = fmt::format("{}:{}", path.string(), number);
    nlohmann::ordered_json j;
    if (json_nesting_depth(line) > kMaxJsonDepth) {
      run.warnings.push_back(fmt::format("{}: skipped, nested deeper than {} levels", where, kMaxJsonDepth));
      continue;
    }
    try {
      j = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      run.warnings.push_back(fmt::format("{}: skipped, not valid JSON at byte {} (cut short by a killed run?): {}",
                                         where, e.byte, excerpt(line)));
      continue;
    } catch (const nlohmann::json::exception& e) {  // e.g. a number out of range
      run.warnings.push_back(fmt::format("{}: skipped, {}: {}", where, e.what(), excerpt(line)));
      continue;
    }
    const auto step = j.is_object() ? j.find("step") : j.end();
    if (!j.is_object() || step == j.end() || !step->is_number_integer() || step->get<int64_t>() < 0) {
      run.warnings.push_back(
          fmt::format("{}: skipped, not a metrics object with an integer \"step\" >= 0: {}", where, excerpt(line)));
      continue;
    }
    auto& row = rows[step->get<int64_t>()];
    if (row.first != 0) {
      run.warnings.push_back(
          fmt::format("{}: step {} repeats line {}; the later line is kept", where, step->get<int64_t>(), row.first));
      row.second.clear();
    }
    row.first = number;
    j.erase("step");
    flatten_numbers(j, "", row.second);
  }
  FP8RL_REQUIRE(!rows.empty(), "report: '{}' holds no valid step (empty, or every line was skipped)", path.string());

  const size_t num_steps = rows.size();
  size_t s = 0;
  for (const auto& [step, row] : rows) {
    run.steps.push_back(step);
    for (const auto& [name, value] : row.second) {
      auto [it, inserted] = run.series.try_emplace(name, num_steps, kNaN);
      if (inserted) run.metric_order.push_back(name);
      it->second[s] = value;
    }
    ++s;
  }
  read_config(run);
  return run;
}

}  // namespace fp8rl::report
