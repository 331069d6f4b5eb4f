// `fp8rl train`: the GRPO loop of docs/recipe.md sections 5-7, one process, synchronous.
//
// Each step: draw grpo.num_prompts_per_step prompts; the generator samples
// grpo.num_generations_per_prompt responses each; the task's verifier scores them; group
// advantages; the trainer computes prev and reference log-probs; one or more optimizer steps
// (policy.train_global_batch_size sequences each, in micro-batches) on the clipped policy gradient
// with importance-sampling correction and the KL penalty; the refit moves this step's weights into
// the generator; with an FP8 KV cache, the Q/K/V scales are recalibrated on the batch just trained
// on; one line of metrics; validation every grpo.val_period steps.
#pragma once

#include <string>

#include "jobs/recipe.h"

namespace fp8rl {

struct GrpoJobResult {
  double val_accuracy_before = 0;
  double val_accuracy_after = 0;
  int64_t steps = 0;
};

// Runs (or, with `resume`, continues from logger.log_dir/checkpoint) the GRPO job. Every input is
// validated before the run directory is created; an existing run directory is only reused with
// `resume`. `effective_yaml` is stored as config.yaml.
// `stop_after` > 0 ends this invocation after that many steps (with a checkpoint), as an
// interruption would; --resume then continues to grpo.max_num_steps.
GrpoJobResult run_grpo_job(const RunConfig& config, const std::string& effective_yaml, bool resume,
                           int64_t stop_after = 0);

}  // namespace fp8rl
