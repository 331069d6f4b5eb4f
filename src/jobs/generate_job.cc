#include "jobs/generate_job.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/check.h"
#include "core/memory.h"
#include "core/timer.h"
#include "generation/kv_cache.h"
#include "generation/sampling.h"
#include "io/input_file.h"
#include "io/json_depth.h"
#include "model/checkpoint.h"
#include "jobs/model_source.h"
#include "rl/refit.h"

namespace fp8rl {

namespace {

// Longest line of a score input: a sequence of max_seq_len ids fits many times over.
constexpr uint64_t kMaxScoreLineBytes = uint64_t{64} << 20;

// The checkpoint a generate or score invocation reads, with its tokenizer.
struct Checkpoint {
  std::string dir;
  ModelConfig config;
  std::unique_ptr<Tokenizer> tokenizer;
};

Checkpoint open_checkpoint(const RunConfig& run, const char* command) {
  const std::optional<std::string> dir = run.model_dir();
  FP8RL_REQUIRE(dir.has_value(), "{} needs a model directory: --checkpoint DIR, or model.name / model.checkpoint in the "
                                 "recipe", command);
  Checkpoint c{*dir, load_model_config(*dir), nullptr};
  c.tokenizer = load_model_tokenizer(c.dir, run.chat_format, c.config, run.tokenizer);
  return c;
}

// The frozen model under `policy` (each linear's BF16 or FP8 copy, no FP32 masters): the
// generator's refit source, whose bytes it reads in place, or the trainer of score --trainer.
Transformer load_source(const Checkpoint& c, const PrecisionPolicy& policy, const char* command) {
  check_model_directory(c.dir, c.config, policy.linear == Precision::kFP8 ? 1.0 : 2.0, command);
  return load_frozen_model(c.dir, policy);
}

// The Q/K/V scales of an FP8 KV cache, calibrated on `prompt` (no run's training batch is at hand).
std::vector<QkvScales> prompt_kv_scales(Transformer& source, const RunConfig& run, const std::vector<int32_t>& prompt,
                                        int32_t pad) {
  TokenBatch b = TokenBatch::empty(1, static_cast<int64_t>(prompt.size()), pad);
  b.tokens = prompt;
  return kv_scales_from_amax(source.qkv_amax(b), run.kv_scale_granularity, static_cast<float>(run.kv_scale_margin));
}

SamplingParams sampling_of(const RunConfig& run, uint64_t seed) {
  return {static_cast<float>(run.temperature), run.top_k, static_cast<float>(run.top_p), seed};
}

// Floats as JSON numbers that read back as the same float32.
nlohmann::json floats_json(const std::vector<float>& v) {
  nlohmann::json j = nlohmann::json::array();
  for (float x : v) j.push_back(std::isfinite(x) ? nlohmann::json(static_cast<double>(x)) : nlohmann::json(nullptr));
  return j;
}

std::string dump_line(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);  // a cut UTF-8 character becomes U+FFFD
}

void check_finite(const std::vector<float>& logprobs, const std::string& checkpoint) {
  FP8RL_REQUIRE(std::all_of(logprobs.begin(), logprobs.end(), [](float x) { return std::isfinite(x); }),
                "the model's log-probs are NaN or infinite: its weights in '{}' are finite but overflow the forward "
                "(the last checkpoint of a diverged run?)",
                checkpoint);
}

// One line of a score input, as ids.
struct ScoreLine {
  std::vector<int32_t> prompt, response;
};

std::vector<int32_t> ids_field(const nlohmann::json& j, const char* key, const InputFile& in, int64_t vocab) {
  const nlohmann::json& v = j[key];
  FP8RL_REQUIRE(v.is_array() && !v.empty(), "{} line {}: \"{}\" must be a non-empty array of token ids",
                in.describe(), in.line_number(), key);
  std::vector<int32_t> ids;
  for (const nlohmann::json& x : v) {
    FP8RL_REQUIRE(x.is_number_integer() && x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab,
                  "{} line {}: \"{}\" holds {}, not a token id in [0, {})", in.describe(), in.line_number(), key,
                  x.dump(), vocab);
    ids.push_back(x.get<int32_t>());
  }
  return ids;
}

std::vector<ScoreLine> read_score_input(const std::string& path, const Tokenizer& tok, const ModelConfig& config) {
  InputFile in(path, "score input");
  std::vector<ScoreLine> lines;
  std::string text;
  while (in.read_line(text, kMaxScoreLineBytes, "the 64 MiB line limit")) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    FP8RL_REQUIRE(json_nesting_depth(text) <= kMaxJsonDepth, "{} line {}: nested deeper than {} levels", in.describe(),
                  in.line_number(), kMaxJsonDepth);
    const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    FP8RL_REQUIRE(j.is_object(), "{} line {}: not a JSON object", in.describe(), in.line_number());
    ScoreLine l;
    if (j.contains("prompt_ids") || j.contains("response_ids")) {
      l.prompt = ids_field(j, "prompt_ids", in, config.vocab_size);
      l.response = ids_field(j, "response_ids", in, config.vocab_size);
    } else {
      FP8RL_REQUIRE(j.contains("prompt") && j["prompt"].is_string() && j.contains("response") && j["response"].is_string(),
                    "{} line {}: expected {{\"prompt\": text, \"response\": text}} or {{\"prompt_ids\": [...], "
                    "\"response_ids\": [...]}}",
                    in.describe(), in.line_number());
      l.prompt = tok.encode_prompt(j["prompt"].get<std::string>());
      l.response = tok.encode_answer(j["response"].get<std::string>());
      FP8RL_REQUIRE(!l.response.empty(), "{} line {}: the response is empty", in.describe(), in.line_number());
    }
    FP8RL_REQUIRE(static_cast<int64_t>(l.prompt.size() + l.response.size()) <= config.max_seq_len,
                  "{} line {}: {} prompt + {} response tokens exceed the model's max_seq_len {}", in.describe(),
                  in.line_number(), l.prompt.size(), l.response.size(), config.max_seq_len);
    lines.push_back(std::move(l));
  }
  FP8RL_REQUIRE(!lines.empty(), "{}: no lines to score", in.describe());
  return lines;
}

// The generator's teacher-forced log-probs of each line's response.
std::vector<std::vector<float>> score_with_generator(const RunConfig& run, const Checkpoint& c,
                                                     const std::vector<ScoreLine>& lines, bool size_kv_cache) {
  const PrecisionPolicy policy = run.generator_policy();
  Transformer source = load_source(c, policy, "score");
  EngineOptions eo = run.engine_options();
  if (size_kv_cache) {
    int64_t longest = 0;
    for (const ScoreLine& l : lines) longest = std::max<int64_t>(longest, std::ssize(l.prompt) + std::ssize(l.response));
    eo.kv_cache_bytes = std::max(eo.kv_cache_bytes, kv_pages_for(longest) * kPageTokens *
                                                        KvCache::bytes_per_token(c.config.n_layers, c.config.kv_dim(), eo.kv_dtype));
  }
  GenerationEngine engine(c.config, policy, eo);
  refit_generator_weights(source, engine);
  const SamplingParams sampling = sampling_of(run, 0);
  const int64_t V = c.config.vocab_size;
  std::vector<float> scratch(static_cast<size_t>(V));
  std::vector<std::vector<float>> out;
  const std::vector<int32_t>* calibrated = nullptr;  // the prompt the KV scales are from
  for (const ScoreLine& l : lines) {
    if (eo.kv_dtype == DType::kE4M3 && (calibrated == nullptr || *calibrated != l.prompt)) {
      engine.set_kv_scales(prompt_kv_scales(source, run, l.prompt, c.tokenizer->pad()));
      calibrated = &l.prompt;
    }
    std::vector<int32_t> tokens = l.prompt;
    tokens.insert(tokens.end(), l.response.begin(), l.response.end());
    // Row prompt-1+j predicts response[j].
    const std::vector<float> logits = engine.prompt_logits(tokens, std::ssize(l.prompt) - 1);
    std::vector<float> lp;
    for (size_t j = 0; j < l.response.size(); ++j)
      lp.push_back(token_logprob(logits.data() + j * static_cast<size_t>(V), V, sampling, l.response[j], scratch.data()));
    out.push_back(std::move(lp));
  }
  return out;
}

// The trainer's log-probs (policy.* precision; with policy.fp8_kv_attention its attention over
// the E4M3 values of the generator's FP8 KV cache, scales calibrated on each prompt).
std::vector<std::vector<float>> score_with_trainer(const RunConfig& run, const Checkpoint& c,
                                                   const std::vector<ScoreLine>& lines) {
  Transformer model = load_source(c, run.trainer_policy(), "score");
  const bool fp8_kv = run.kv_cache_dtype == DType::kE4M3 && run.fp8_kv_attention;
  std::vector<std::vector<float>> out;
  for (const ScoreLine& l : lines) {
    if (fp8_kv) {  // calibrated as generate does: by the forward without E4M3 attention
      model.set_attention_e4m3_scales({});
      model.set_attention_e4m3_scales(attention_e4m3_scales(prompt_kv_scales(model, run, l.prompt, c.tokenizer->pad()),
                                                            c.config.n_kv_heads, run.fp8_attention));
    }
    const int64_t P = std::ssize(l.prompt), n = P + std::ssize(l.response);
    TokenBatch b = TokenBatch::empty(1, n, c.tokenizer->pad());
    std::copy(l.prompt.begin(), l.prompt.end(), b.tokens.begin());
    std::copy(l.response.begin(), l.response.end(), b.tokens.begin() + P);
    for (int64_t j = 0; j < std::ssize(l.response); ++j) b.targets[static_cast<size_t>(P - 1 + j)] = l.response[static_cast<size_t>(j)];
    std::vector<float> lp(static_cast<size_t>(n));
    model.forward(b, lp.data(), /*for_backward=*/false);
    out.emplace_back(lp.begin() + (P - 1), lp.begin() + (P - 1) + std::ssize(l.response));
  }
  return out;
}

}  // namespace

int64_t kv_budget_for_request(int64_t bytes_per_token, int64_t prompt_tokens, int64_t samples, int64_t max_new_tokens,
                              int64_t max_num_seqs, int64_t configured_bytes, int64_t cap_bytes) {
  const int64_t needed = (kv_pages_for(prompt_tokens) + std::min(samples, max_num_seqs) * kv_pages_for(max_new_tokens)) *
                         kPageTokens * bytes_per_token;
  return std::max(configured_bytes, std::min(needed, cap_bytes));
}

void run_generate_job(const RunConfig& run, const GenerateJobOptions& o) {
  const Timer clock;
  const Checkpoint c = open_checkpoint(run, "generate");
  const Tokenizer& tok = *c.tokenizer;
  FP8RL_REQUIRE(!o.experts || c.config.is_moe(), "generate --experts: the model in '{}' has no Mixture-of-Experts layers",
                c.dir);
  FP8RL_REQUIRE(!o.experts || o.json, "generate --experts needs --json");
  const PrecisionPolicy policy = run.generator_policy();
  Transformer source = load_source(c, policy, "generation");
  const std::vector<int32_t> prompt = tok.encode_prompt(o.prompt);
  FP8RL_REQUIRE(static_cast<int64_t>(prompt.size()) + run.max_new_tokens <= c.config.max_seq_len,
                "generate: the prompt's {} tokens + --max-new-tokens {} exceed the model's max_seq_len {} ('{}')",
                prompt.size(), run.max_new_tokens, c.config.max_seq_len, c.dir);
  EngineOptions eo = run.engine_options();
  if (o.size_kv_cache_to_request) {
    // Half of the memory available now at most: the rest stays for the activations and the OS.
    const int64_t bytes_per_token = KvCache::bytes_per_token(c.config.n_layers, c.config.kv_dim(), eo.kv_dtype);
    eo.kv_cache_bytes =
        kv_budget_for_request(bytes_per_token, static_cast<int64_t>(prompt.size()), o.num_samples, run.max_new_tokens,
                              eo.max_num_seqs, eo.kv_cache_bytes, available_memory_bytes() / 2);
  }
  GenerationEngine engine(c.config, policy, eo);
  refit_generator_weights(source, engine);
  // With --json, stdout holds the samples only; what describes the run goes to stderr.
  std::FILE* notes = o.json ? stderr : stdout;
  if (eo.kv_dtype == DType::kE4M3) {
    engine.set_kv_scales(prompt_kv_scales(source, run, prompt, tok.pad()));
    fmt::print(notes, "KV scales calibrated on the prompt ({} * amax / 448 per {})\n", run.kv_scale_margin,
               kv_scale_granularity_name(run.kv_scale_granularity));
  }
  GenerateOptions g;
  g.max_new_tokens = run.max_new_tokens;
  g.sampling = sampling_of(run, o.seed);
  g.eos = tok.eos();
  const double load_seconds = clock.seconds();
  const auto seqs = engine.generate({prompt}, o.num_samples, g);
  const GenerationStats& st = engine.last_stats();
  for (const GeneratedSequence& s : seqs) check_finite(s.logprobs, c.dir);
  fmt::print(notes, "prompt {:?}, {} samples, {} linears, {} KV cache\n", o.prompt, o.num_samples,
             precision_name(policy.linear), kv_dtype_name(eo.kv_dtype));
  const int64_t layers = c.config.num_moe_layers(), k = c.config.experts_per_token;
  for (const GeneratedSequence& s : seqs) {
    const char* finish = s.finish == FinishReason::kStop ? "eos" : "length";
    if (o.json) {
      nlohmann::json j = {{"prompt_ids", prompt},
                          {"response_ids", s.tokens},
                          {"text", tok.decode_response(s.tokens)},
                          {"logprobs", floats_json(s.logprobs)},
                          {"finish_reason", finish}};
      if (o.experts) {  // [position][MoE layer][k], every position the model read
        nlohmann::json positions = nlohmann::json::array();
        for (size_t at = 0; at < s.routing.size(); at += static_cast<size_t>(layers * k)) {
          nlohmann::json per_layer = nlohmann::json::array();
          for (int64_t l = 0; l < layers; ++l)
            per_layer.push_back(std::vector<int>(s.routing.begin() + static_cast<std::ptrdiff_t>(at + l * k),
                                                 s.routing.begin() + static_cast<std::ptrdiff_t>(at + (l + 1) * k)));
          positions.push_back(std::move(per_layer));
        }
        j["experts"] = std::move(positions);
      }
      fmt::print("{}\n", dump_line(j));
      continue;
    }
    double total = 0;
    std::string lps;
    for (size_t i = 0; i < s.tokens.size(); ++i) {
      total += s.logprobs[i];
      lps += fmt::format("{}{:.3f}", i ? " " : "", s.logprobs[i]);
    }
    fmt::print("[{}] {:?}  logprob {:.3f}  ({})  tokens [{}]\n", s.sample_index, tok.decode_response(s.tokens), total,
               finish, lps);
  }
  std::fflush(stdout);
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

void run_score_job(const RunConfig& run, const ScoreJobOptions& o) {
  const Timer clock;
  const Checkpoint c = open_checkpoint(run, "score");
  const std::vector<ScoreLine> lines = read_score_input(o.input, *c.tokenizer, c.config);
  const std::vector<std::vector<float>> logprobs =
      o.trainer ? score_with_trainer(run, c, lines) : score_with_generator(run, c, lines, o.size_kv_cache_to_request);
  int64_t tokens = 0;
  for (const std::vector<float>& lp : logprobs) {
    double sum = 0;
    for (float x : lp) sum += x;
    tokens += std::ssize(lp);
    fmt::print("{}\n", dump_line({{"logprobs", floats_json(lp)}, {"logprob_sum", std::isfinite(sum) ? nlohmann::json(sum) : nlohmann::json(nullptr)},
                                  {"num_tokens", lp.size()}}));
  }
  std::fflush(stdout);
  fmt::print(stderr, "score: {} lines, {} response tokens under the {} ({} linears) in {:.2f} s; peak RSS {:.2f} GiB\n",
             lines.size(), tokens, o.trainer ? "trainer" : "generator",
             precision_name(o.trainer ? run.trainer_policy().linear : run.generator_policy().linear), clock.seconds(),
             gib(peak_rss_bytes()));
}

}  // namespace fp8rl
