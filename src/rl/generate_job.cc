#include "rl/generate_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/memory.h"
#include "core/timer.h"
#include "generation/kv_cache.h"
#include "model/checkpoint.h"
#include "rl/model_source.h"
#include "rl/refit.h"

namespace fp8rl {

int64_t kv_budget_for_request(int64_t bytes_per_token, int64_t prompt_tokens, int64_t samples, int64_t max_new_tokens,
                              int64_t max_num_seqs, int64_t configured_bytes, int64_t cap_bytes) {
  const int64_t needed = (kv_pages_for(prompt_tokens) + std::min(samples, max_num_seqs) * kv_pages_for(max_new_tokens)) *
                         kPageTokens * bytes_per_token;
  return std::max(configured_bytes, std::min(needed, cap_bytes));
}

void run_generate_job(const RunConfig& run, const GenerateJobOptions& o) {
  const std::optional<std::string> dir = run.model_dir();
  FP8RL_REQUIRE(dir.has_value(), "generate needs a model directory: --checkpoint DIR, or model.name / model.checkpoint "
                                 "in the recipe");
  const std::string& checkpoint = *dir;
  const ModelConfig config = load_model_config(checkpoint);
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(checkpoint, run.chat_format, config, run.tokenizer);
  const Tokenizer& tok = *tokenizer;
  const PrecisionPolicy policy = run.generator_policy();
  // The trainer side only serves as the refit source and, for an FP8 KV cache, the calibration:
  // a frozen model under the generator's policy (each linear's BF16 or FP8 copy, no FP32
  // masters), whose bytes the generator then reads in place.
  const Timer clock;
  check_model_directory(checkpoint, config, policy.linear == Precision::kFP8 ? 1.0 : 2.0, "generation");
  Transformer trainer = load_frozen_model(checkpoint, policy);
  const std::vector<int32_t> prompt = tok.encode_prompt(o.prompt);
  FP8RL_REQUIRE(static_cast<int64_t>(prompt.size()) + run.max_new_tokens <= config.max_seq_len,
                "generate: the prompt's {} tokens + --max-new-tokens {} exceed the model's max_seq_len {} ('{}')",
                prompt.size(), run.max_new_tokens, config.max_seq_len, checkpoint);
  EngineOptions eo = run.engine_options();
  if (o.size_kv_cache_to_request) {
    // Half of the memory available now at most: the rest stays for the activations and the OS.
    const int64_t bytes_per_token = KvCache::bytes_per_token(config.n_layers, config.kv_dim(), eo.kv_dtype);
    eo.kv_cache_bytes =
        kv_budget_for_request(bytes_per_token, static_cast<int64_t>(prompt.size()), o.num_samples, run.max_new_tokens,
                              eo.max_num_seqs, eo.kv_cache_bytes, available_memory_bytes() / 2);
  }
  GenerationEngine engine(config, policy, eo);
  refit_generator_weights(trainer, engine);
  if (eo.kv_dtype == DType::kE4M3) {
    TokenBatch b = TokenBatch::empty(1, static_cast<int64_t>(prompt.size()), tok.pad());
    b.tokens = prompt;
    engine.set_kv_scales(kv_scales_from_amax(trainer.qkv_amax(b), run.kv_scale_granularity,
                                             static_cast<float>(run.kv_scale_margin)));
    fmt::print("KV scales calibrated on the prompt ({} * amax / 448 per {})\n", run.kv_scale_margin,
               kv_scale_granularity_name(run.kv_scale_granularity));
  }
  GenerateOptions g;
  g.max_new_tokens = run.max_new_tokens;
  g.sampling = {static_cast<float>(run.temperature), run.top_k, static_cast<float>(run.top_p), o.seed};
  g.eos = tok.eos();
  const double load_seconds = clock.seconds();
  const auto seqs = engine.generate({prompt}, o.num_samples, g);
  const GenerationStats& st = engine.last_stats();
  for (const GeneratedSequence& s : seqs)
    FP8RL_REQUIRE(std::all_of(s.logprobs.begin(), s.logprobs.end(), [](float x) { return std::isfinite(x); }),
                  "generate: the model's log-probs are NaN or infinite: its weights in '{}' are finite but overflow "
                  "the forward (the last checkpoint of a diverged run?)",
                  checkpoint);
  fmt::print("prompt {:?}, {} samples, {} linears, {} KV cache\n", o.prompt, o.num_samples, precision_name(policy.linear),
             kv_dtype_name(eo.kv_dtype));
  for (const GeneratedSequence& s : seqs) {
    double total = 0;
    std::string lps;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      total += s.logprobs[i];
      lps += fmt::format("{}{:.3f}", i ? " " : "", s.logprobs[i]);
    }
    fmt::print("[{}] {:?}  logprob {:.3f}  ({})  tokens [{}]\n", s.sample_index, tok.decode_response(s.tokens), total,
               s.finish == FinishReason::kStop ? "eos" : "length", lps);
  }
  // On stderr, so that stdout stays the same bits for the same inputs.
  fmt::print(stderr,
             "generate: loaded in {:.2f} s, first tokens at {:.2f} s (prefill {} tokens {:.2f} s), decode {} tokens in "
             "{:.2f} s ({:.1f} tokens/s); KV cache {:.0f} MiB ({} tokens), {} samples at once, {} waited for KV pages; peak RSS "
             "{:.2f} GiB\n",
             load_seconds, load_seconds + st.prefill_seconds, st.prefill_tokens, st.prefill_seconds, st.decode_tokens,
             st.decode_seconds, static_cast<double>(st.decode_tokens) / std::max(st.decode_seconds, 1e-9),
             static_cast<double>(engine.kv_cache().storage_bytes()) / (1 << 20), engine.kv_cache().capacity_tokens(),
             st.peak_active, st.kv_waited, gib(peak_rss_bytes()));
}

}  // namespace fp8rl
