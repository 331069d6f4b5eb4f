// `fp8rl generate` and `fp8rl score`: a checkpoint's generator from the command line. generate
// samples with the generation engine a run's recipe describes and prints each sample with its
// per-token log-probs (as text, or with --json one JSON object per sample); score prints the
// teacher-forced log-probs of given responses under the same generator, or under the trainer.
//
// The JSON Lines schemas (docs/generation.md, "Machine-readable output"):
//
//   generate --json, one line per sample:
//     {"prompt_ids": [...], "response_ids": [...], "text": "...", "logprobs": [...],
//      "finish_reason": "eos" | "length"}   (+ "experts": [position][MoE layer][k] with --experts)
//   score's input, one line each:
//     {"prompt": "text", "response": "text"}  or  {"prompt_ids": [...], "response_ids": [...]}
//   score's output, one line per input line, in order:
//     {"logprobs": [...], "logprob_sum": x, "num_tokens": n}
//
// Log-probs are the float32 values the engine computed (printed so that they read back exactly):
// score over generate --json's ids, with the same recipe and sampling settings, gives them bit
// for bit.
#pragma once

#include <cstdint>
#include <string>

#include "jobs/recipe.h"

namespace fp8rl {

// What a generate invocation adds to the recipe: the prompt, how many samples, the sampling seed.
struct GenerateJobOptions {
  std::string prompt;
  int64_t num_samples = 8;
  uint64_t seed = 1;
  // The KV budget was not chosen (no --recipe, no generation.kv_cache_bytes override): size it
  // to this request, so that the samples decode together (see kv_budget_for_request).
  bool size_kv_cache_to_request = false;
  bool json = false;     // one JSON object per sample on stdout (the other lines go to stderr)
  bool experts = false;  // with json: each position's experts (MoE models)
};

// What a score invocation adds to the recipe.
struct ScoreJobOptions {
  std::string input;     // the JSONL file of (prompt, response) pairs
  bool trainer = false;  // the trainer's log-probs (policy.* precision, temperature 1) instead of the generator's
  bool size_kv_cache_to_request = false;  // as GenerateJobOptions's: to the longest line
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

// Scores every line of options.input: under the generator (as run_generate_job builds it; with
// an FP8 KV cache the scales are calibrated on each line's prompt, as generate does), the
// log-prob sample_token would report for each response token at the recipe's sampling settings;
// with options.trainer, the trainer's log-probs. Bad lines are errors naming the file and line.
void run_score_job(const RunConfig& config, const ScoreJobOptions& options);

}  // namespace fp8rl
