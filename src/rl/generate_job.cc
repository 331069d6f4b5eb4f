#include "rl/generate_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "core/memory.h"
#include "core/timer.h"
#include "model/checkpoint.h"
#include "rl/refit.h"
#include "rl/model_source.h"

namespace fp8rl {

void run_generate_job(const GenerateJobOptions& o) {
  const ModelConfig config = load_model_config(o.checkpoint);
  const std::unique_ptr<Tokenizer> tokenizer = load_model_tokenizer(o.checkpoint, "auto", config);
  const Tokenizer& tok = *tokenizer;
  PrecisionPolicy policy;
  policy.linear = parse_precision(o.precision);
  FP8RL_REQUIRE(policy.linear != Precision::kF32, "--precision must be bf16 or fp8, got {}", o.precision);
  // The trainer side only serves as the refit source and, for an FP8 KV cache, the calibration:
  // a frozen model (each linear's BF16 or FP8 copy, no FP32 masters), whose bytes the generator
  // then reads in place.
  const Timer clock;
  check_model_directory(o.checkpoint, config, policy.linear == Precision::kFP8 ? 1.0 : 2.0, "generation");
  Transformer trainer = load_frozen_model(o.checkpoint, policy);
  EngineOptions eo;
  eo.kv_dtype = parse_kv_dtype(o.kv_cache_dtype.c_str());
  eo.batch_invariant = o.batch_invariant;
  GenerationEngine engine(config, policy, eo);
  refit_generator_weights(trainer, engine);
  const std::vector<int32_t> prompt = tok.encode_prompt(o.prompt);
  FP8RL_REQUIRE(static_cast<int64_t>(prompt.size()) + o.max_new_tokens <= config.max_seq_len,
                "generate: the prompt's {} tokens + --max-new-tokens {} exceed the model's max_seq_len {} ('{}')",
                prompt.size(), o.max_new_tokens, config.max_seq_len, o.checkpoint);
  if (eo.kv_dtype == DType::kE4M3) {
    TokenBatch b = TokenBatch::empty(1, static_cast<int64_t>(prompt.size()), tok.pad());
    b.tokens = prompt;
    engine.set_kv_scales(kv_scales_from_amax(trainer.qkv_amax(b)));
    fmt::print("KV scales calibrated on the prompt (1.05 * amax / 448 per layer)\n");
  }
  GenerateOptions g;
  g.max_new_tokens = o.max_new_tokens;
  g.sampling = {static_cast<float>(o.temperature), o.top_k, static_cast<float>(o.top_p), o.seed};
  g.eos = tok.eos();
  const double load_seconds = clock.seconds();
  const auto seqs = engine.generate({prompt}, o.num_samples, g);
  const GenerationStats& st = engine.last_stats();
  for (const GeneratedSequence& s : seqs)
    FP8RL_REQUIRE(std::all_of(s.logprobs.begin(), s.logprobs.end(), [](float x) { return std::isfinite(x); }),
                  "generate: the model's log-probs are NaN or infinite: its weights in '{}' are finite but overflow "
                  "the forward (the last checkpoint of a diverged run?)",
                  o.checkpoint);
  fmt::print("prompt {:?}, {} samples, {} linears, {} KV cache\n", o.prompt, o.num_samples, o.precision, o.kv_cache_dtype);
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
             "generate: loaded in {:.2f} s, first tokens at {:.2f} s (prefill {} tokens {:.2f} s), decode {} tokens in {:.2f} s "
             "({:.1f} tokens/s); peak RSS {:.2f} GiB\n",
             load_seconds, load_seconds + st.prefill_seconds, st.prefill_tokens, st.prefill_seconds, st.decode_tokens,
             st.decode_seconds, static_cast<double>(st.decode_tokens) / std::max(st.decode_seconds, 1e-9),
             gib(peak_rss_bytes()));
}

}  // namespace fp8rl
