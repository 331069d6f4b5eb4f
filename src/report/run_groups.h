// Runs grouped by preset, and the summary row of each group (the table of docs/results.md).
//
// A run's preset is the `run.name` of its config.yaml: the recipe's name (grpo-bf16,
// grpo-fp8-e2e, ...), which the seeds of one preset share (scripts/results.sh sets the seed and
// the log directory, not the name). A run without a readable config.yaml falls back to its
// directory name less a "-seed<k>" suffix, as tools/summarize_runs.py groups. Groups keep the
// order in which their first run was given.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "report/run_metrics.h"

namespace fp8rl::report {

struct RunGroup {
  std::string preset;
  std::vector<const RunMetrics*> runs;  // borrowed; in the order given
  // Config keys whose values differ between the runs, other than the seed and the log directory:
  // if not empty, the "seeds" of this group are not repeats of one configuration.
  std::vector<std::string> differing_keys;
};

std::string run_preset(const RunMetrics& run);
std::vector<RunGroup> group_runs_by_preset(const std::vector<RunMetrics>& runs);

// Mean, the half-width of its 95 % interval (report/intervals.h; NaN with fewer than two runs),
// minimum and maximum over the runs of a group (NaN where no run has the figure).
struct Spread {
  double mean, ci95, min, max;
};

struct GroupSummary {
  std::string preset;
  int num_runs = 0;
  std::string precision;                           // policy / generation / KV cache: "fp8 / fp8 / bf16" (config)
  Spread final_val_accuracy;                       // the last val_accuracy of each run
  std::vector<double> final_val_accuracy_per_run;  // in the group's run order (for differences)
  double reward_first = 0;           // mean reward_mean of each run's first five steps, averaged over runs
  double reward_last = 0;            // the same over the last five steps
  double token_mult_prob_error = 0;  // per-run means over steps, averaged over runs
  double gen_kl_error = 0;
  double is_oob_ratio = 0;
  double step_seconds = 0;  // timing.total (or the sum of the parts), per-run mean, averaged over runs
  // timing.<key> for timing_keys, in the order metrics.jsonl has them: (key, mean seconds).
  std::vector<std::pair<std::string, double>> time_split;
};

GroupSummary summarize_group(const RunGroup& group);

// The difference in final validation accuracy between two presets, a minus b, with Welch's 95 %
// interval (report/intervals.h), for every pair of groups a before b in the given order.
struct AccuracyDifference {
  std::string a, b;
  double difference, ci95;
};
std::vector<AccuracyDifference> final_accuracy_differences(const std::vector<GroupSummary>& summaries);

// The timing keys ("generation", "logprobs", ...) that any of the runs has, in the order first
// seen: the phases of a step, so without "total" and without the parts of "training"
// ("optimizer", "communication").
std::vector<std::string> timing_keys(const std::vector<const RunMetrics*>& runs);

}  // namespace fp8rl::report
