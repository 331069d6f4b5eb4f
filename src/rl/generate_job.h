// `fp8rl generate`: samples from a model directory with the generation engine a run's recipe
// describes, and prints each sample with its per-token log-probs.
#pragma once

#include <cstdint>
#include <string>

#include "rl/recipe.h"

namespace fp8rl {

// What a generate invocation adds to the recipe: the prompt, how many samples, the sampling seed.
struct GenerateJobOptions {
  std::string prompt;
  int64_t num_samples = 8;
  uint64_t seed = 1;
  // The KV budget was not chosen (no --recipe, no generation.kv_cache_bytes override): size it
  // to this request, so that the samples decode together (see kv_budget_for_request).
  bool size_kv_cache_to_request = false;
};

// K/V bytes for a prompt of `prompt_tokens` shared by `samples` samples of up to `max_new_tokens`
// each, all in flight at once (the engine's page accounting: the prompt's pages once, each
// sample's own pages), at most `max_num_seqs` samples at once; never more than `cap_bytes`, nor
// less than `configured_bytes`.
int64_t kv_budget_for_request(int64_t bytes_per_token, int64_t prompt_tokens, int64_t samples, int64_t max_new_tokens,
                              int64_t max_num_seqs, int64_t configured_bytes, int64_t cap_bytes);

// Generates from config.model_dir() (model.name or model.checkpoint; one is required) with the
// recipe's generator: generation.precision and its BF16 layers, policy.attention_precision,
// policy.fp32_lm_head, the power-of-two scale options, generation.kv_cache_dtype, fp8_attention,
// batch_invariant, temperature, top_p, top_k and max_new_tokens. With an FP8 KV cache the Q/K/V
// scales come from a calibration forward over the prompt (generation.kv_scale_granularity and
// kv_scale_margin), since no run's training batch is at hand.
void run_generate_job(const RunConfig& config, const GenerateJobOptions& options);

}  // namespace fp8rl
