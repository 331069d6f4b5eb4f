// A run directory read back for `fp8rl report`: metrics.jsonl (one JSON object per step, written
// by `fp8rl train` and `fp8rl sft`) and config.yaml (the run's effective configuration).
//
//   RunMetrics run = read_run_metrics("runs/results/bf16-seed1");
//   for (const std::string& w : run.warnings) fmt::print(stderr, "warning: {}\n", w);
//   const std::vector<double>* reward = run.find("reward_mean");  // (S), aligned with run.steps
//
// The reader is tolerant, because a report is often made while a run is still writing, or after
// one was killed mid-line: a line that is not a JSON object with an integer "step" >= 0 (a
// truncated line, a foreign line) is skipped with a warning naming the file and the line number
// ("runs/x/metrics.jsonl:17: ..."); blank lines are skipped silently; a step that appears twice
// keeps its later line (with a warning). Numbers inside objects are flattened with dots
// ("timing.generation"); JSON null (how the writer stores a non-finite value) reads as NaN;
// strings, booleans and arrays (e.g. "kv_scales") are ignored. A missing or unparsable
// config.yaml is a warning too.
//
// Errors (fp8rl::Error, naming the directory and what to do): the directory does not exist, it
// holds no metrics.jsonl, or no line of it is a valid step.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8rl::report {

struct RunMetrics {
  std::filesystem::path dir;                                // as given
  std::string name;                                         // the directory's last component
  std::vector<int64_t> steps;                               // (S) ascending, unique
  std::map<std::string, std::vector<double>> series;        // metric -> (S) values, NaN where a step lacks it
  std::vector<std::string> metric_order;                    // metric names in the order first seen
  std::vector<std::pair<std::string, std::string>> config;  // config.yaml flattened: dotted key -> value text
  std::string config_yaml;                                  // config.yaml verbatim ("" if absent)
  std::vector<std::string> warnings;                        // one line each, naming file and line

  // The values of `metric` aligned with `steps`, or nullptr if no step has it.
  const std::vector<double>* find(std::string_view metric) const;
  // The config value of a dotted key (strings without their quotes), or `fallback`.
  std::string config_value(std::string_view key, std::string_view fallback = "") const;
};

RunMetrics read_run_metrics(const std::filesystem::path& dir);

}  // namespace fp8rl::report
