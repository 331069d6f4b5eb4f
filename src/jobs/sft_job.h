// `fp8rl sft` and `fp8rl eval`: supervised warm start on a task's (prompt, answer) pairs and
// greedy validation accuracy, driven by a RunConfig.
#pragma once

#include <filesystem>
#include <string>

#include "jobs/recipe.h"

namespace fp8rl {

struct SftJobResult {
  double val_accuracy_before = 0;
  double val_accuracy_after = 0;
  std::filesystem::path checkpoint;  // logger.log_dir / "checkpoint"
};

// Trains for sft.max_num_steps, printing one progress line per log step, writes
// logger.log_dir/{config.yaml, sft_metrics.jsonl} and the checkpoint (atomically), and reports
// validation accuracy before and after. `effective_yaml` is the configuration to store.
SftJobResult run_sft_job(const RunConfig& config, const std::string& effective_yaml);

// Greedy validation accuracy of model.checkpoint (required) on the config's task.
double run_eval_job(const RunConfig& config);

}  // namespace fp8rl
