// `fp8rl bench generate`: the rollout generator's throughput (GenerationEngine, medium preset):
//
//   decode_{bf16,fp8}_weights  decode tokens/s at 1, 8 and 64 concurrent sequences, BF16 or FP8
//                              linears, BF16 KV cache (32-token prompts, 64 new tokens each);
//   decode_ctx2048_{bf16,fp8}_kv  (group `long`) decode tokens/s of 8 samples of one 2048-token
//                              prompt (the GRPO shape: G samples share the prompt's pages), BF16
//                              linears, BF16 or FP8 KV cache (FP8 attention, the recipe's default);
//   decode_ctx2048_kv_budget_{bf16,fp8}_kv  (group `capacity`) a fixed KV budget (64 MiB: four
//                              2048-token sequences in BF16, eight in FP8) and eight prompts of
//                              2032 tokens with 16 new tokens each, BF16 linears; as many
//                              sequences run together as fit (the others wait for pages), so
//                              FP8 KV decodes all eight in one pass of the weights per step where
//                              BF16 KV decodes two waves of four;
//   prefill_{bf16,fp8}_weights prefill tokens/s of 8 prompts of 256 tokens;
//   torch_decode               the PyTorch eager baseline (same model, BF16 weights, KV-cached
//                              greedy loop) at 8 sequences, run as a subprocess
//                              (tools/bench/torch_decode.py) with torch.set_num_threads matching;
//   decode_large_{bf16,fp8}_weights  decode tokens/s at 1 sequence for the `large` preset, whose
//                              FP8 weights (~720 MiB) exceed this machine's L3 (the `medium`
//                              weights, 24 MiB in FP8, fit in it); with the engine's default
//                              batch invariance, then without it (records say which).
//
// Times come from the engine's own clock (GenerationStats: prefill and decode forwards, sampling
// included), medians over --repeats runs after a warm-up. The cases compared with each other
// (BF16 vs FP8) run alternately, one of each per round, so a change of machine load affects both.
// Weights are random; prompts are random tokens; decoding is greedy with no eos, so every
// sequence runs to max_new_tokens. The GEMVs and attention (one task per row) run on `threads`.
// Every engine runs the GRPO presets' BF16 attention (`attention` in each record).
// `--cases decode,prefill,peer,long,capacity,large` runs only those groups (the peer's needs the
// decode cases, which run with it).
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_suites.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "generation/engine.h"
#include "model/hf_config.h"
#include "model/transformer.h"
#include "rl/refit.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl::bench {
namespace {

constexpr const char* kPeerName = "torch_eager_bf16";

struct GenerateBenchSetup {
  ModelConfig config;       // `medium` with max_seq_len raised for the long-context case
  int64_t prompt_tokens = 32, new_tokens = 64;
  std::vector<int64_t> sequences = {1, 8, 64};
  int64_t long_context = 2048, long_samples = 8, long_new_tokens = 16;
  int64_t budget_bf16_sequences = 4;  // the capacity case's KV budget, in long_context-token BF16 sequences
  int64_t prefill_prompts = 8, prefill_tokens = 256;
  int64_t peer_sequences = 8;
  bool large = true;        // run the `large` preset case
};

GenerateBenchSetup generate_bench_setup(bool quick, const BenchOptions& o) {
  GenerateBenchSetup s;
  if (!o.model_dir.empty()) {
    s.config = load_model_config(o.model_dir);
  } else {
    s.config = model_preset(o.preset.empty() ? (quick ? "tiny" : "medium") : o.preset, CharTokenizer::kVocabSize);
  }
  if (!o.model_dir.empty() || !o.preset.empty()) {  // a real model's shape: 16 sequences at most, no `large` case
    s.sequences = {1, 8, 16};
    s.large = false;
  }
  if (quick) {
    s.prompt_tokens = 8, s.new_tokens = 8, s.sequences = {1, 8};
    s.long_context = 64, s.long_samples = 2, s.long_new_tokens = 4;
    s.budget_bf16_sequences = 2;
    s.prefill_prompts = 2, s.prefill_tokens = 16;
    s.large = false;
  }
  s.config.max_seq_len = std::max(s.config.max_seq_len, s.long_context + s.long_new_tokens);
  return s;
}

// L3 size of this machine in bytes (sysfs), 0 if unknown.
int64_t l3_cache_bytes() {
  std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index3/size");
  std::string text;
  if (!(f >> text) || text.empty()) return 0;
  int64_t unit = 1;
  if (text.back() == 'K') unit = 1 << 10;
  if (text.back() == 'M') unit = 1 << 20;
  if (unit != 1) text.pop_back();
  try {
    return std::stoll(text) * unit;
  } catch (...) {
    return 0;
  }
}

// Bytes of the transformer linears' weights in the engine (scales of FP8 weights not counted; the
// BF16 LM head is included).
int64_t linear_weight_bytes(const ModelConfig& c, Precision p) {
  const int64_t C = c.d_model, F = c.d_ff;
  const int64_t per_layer = 2 * C * c.q_dim() + 2 * C * c.kv_dim() + 3 * C * F;
  return per_layer * c.n_layers * (p == Precision::kFP8 ? 1 : 2) + 2 * c.vocab_size * C;
}

std::vector<std::vector<int32_t>> random_prompts(int64_t count, int64_t length, int64_t vocab, uint64_t seed) {
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(count));
  for (int64_t p = 0; p < count; ++p) {
    prompts[static_cast<size_t>(p)].push_back(CharTokenizer::kBos);
    for (int64_t t = 1; t < length; ++t)
      prompts[static_cast<size_t>(p)].push_back(
          3 + static_cast<int32_t>(random_u32(seed, static_cast<uint64_t>(p), static_cast<uint64_t>(t)) %
                                   static_cast<uint32_t>(vocab - 3)));
  }
  return prompts;
}

// An engine and the frozen trainer weights it reads in place (the refit hands over pointers to
// the trainer's BF16 / FP8 bytes, so they live as long as the engine).
struct BenchEngine {
  std::unique_ptr<Transformer> weights;
  std::unique_ptr<GenerationEngine> engine;
  GenerationEngine* operator->() const { return engine.get(); }
  GenerationEngine& operator*() const { return *engine; }
  void reset() {
    engine.reset();
    weights.reset();
  }
};

// An engine for `config` with random weights (seed 1, the trainer's init) handed over by the
// refit, as in the GRPO loop; with an FP8 KV cache, the Q/K/V scales are calibrated on a trainer
// forward over one random prompt.
BenchEngine engine_from_trainer(const ModelConfig& config, Precision linear, DType kv, int64_t kv_cache_bytes) {
  PrecisionPolicy policy;
  policy.linear = linear;
  policy.attention = Precision::kBF16;  // the GRPO presets' attention_precision
  BenchEngine e;
  {
    Transformer trainer(config, policy);
    trainer.init_random(/*seed=*/1);
    e.weights = std::make_unique<Transformer>(trainer.frozen_copy());
  }
  Transformer& weights = *e.weights;
  EngineOptions eo;
  eo.kv_dtype = kv;
  eo.kv_cache_bytes = kv_cache_bytes;
  eo.max_num_seqs = 64;
  e.engine = std::make_unique<GenerationEngine>(config, policy, eo);
  refit_generator_weights(weights, *e.engine);
  if (kv == DType::kE4M3) {
    const int64_t T = std::min<int64_t>(64, config.max_seq_len);
    TokenBatch batch = TokenBatch::empty(1, T, CharTokenizer::kPad);
    batch.tokens = random_prompts(1, T, config.vocab_size, 5)[0];
    e.engine->set_kv_scales(kv_scales_from_amax(weights.qkv_amax(batch)));
  }
  return e;
}

// One generate call's timing.
struct RunTimes {
  double prefill_seconds = 0, decode_seconds = 0;
  int64_t prefill_tokens = 0, decode_tokens = 0;
  int64_t peak_active = 0, kv_waited = 0;
};

RunTimes run_generate(GenerationEngine& engine, const std::vector<std::vector<int32_t>>& prompts, int64_t samples,
                      int64_t new_tokens) {
  GenerateOptions go;
  go.max_new_tokens = new_tokens;
  go.sampling.temperature = 0.0f;  // greedy
  go.eos = -1;                     // never generated: every sequence runs to max_new_tokens
  engine.generate(prompts, samples, go);
  const GenerationStats& s = engine.last_stats();
  return {s.prefill_seconds, s.decode_seconds, s.prefill_tokens, s.decode_tokens, s.peak_active, s.kv_waited};
}

// Runs every function once (warm-up, unless `warm_up` is false), then `repeats` rounds of all of
// them in turn; returns per function the run with the median decode time and the median prefill
// time.
std::vector<RunTimes> rounds(const std::vector<std::function<RunTimes()>>& fns, int repeats, bool warm_up = true) {
  if (warm_up)
    for (const auto& fn : fns) fn();
  std::vector<std::vector<RunTimes>> runs(fns.size());
  for (int r = 0; r < std::max(1, repeats); ++r)
    for (size_t i = 0; i < fns.size(); ++i) runs[i].push_back(fns[i]());
  std::vector<RunTimes> out;
  for (const auto& rs : runs) {
    std::vector<double> prefill, decode;
    for (const RunTimes& t : rs) prefill.push_back(t.prefill_seconds), decode.push_back(t.decode_seconds);
    RunTimes m = rs.front();
    m.prefill_seconds = median(prefill);
    m.decode_seconds = median(decode);
    out.push_back(m);
  }
  return out;
}

double decode_rate(const RunTimes& t) { return static_cast<double>(t.decode_tokens) / t.decode_seconds; }
double prefill_rate(const RunTimes& t) { return static_cast<double>(t.prefill_tokens) / t.prefill_seconds; }

nlohmann::ordered_json record(const std::string& name, const ModelConfig& config) {
  return {{"suite", "generate"}, {"case", name}, {"preset", config.preset}, {"attention", "bf16"},
          {"threads", kernel_threads()}};
}

// `large` with random weights, without a trainer (its FP32 masters and AdamW state would need
// ~12 GB): one layer's FP32 weights serve as the source of every layer; the engine packs each
// layer into its own buffers, so the decode streams all of them.
std::unique_ptr<GenerationEngine> synthetic_engine(const ModelConfig& c, Precision linear, bool batch_invariant,
                                                   const std::vector<std::vector<float>>& tensors) {
  PrecisionPolicy policy;
  policy.linear = linear;
  policy.attention = Precision::kBF16;  // the GRPO presets' attention_precision
  EngineOptions eo;
  eo.kv_cache_bytes = 8 << 20;
  eo.max_num_seqs = 1;
  eo.batch_invariant = batch_invariant;
  auto engine = std::make_unique<GenerationEngine>(c, policy, eo);
  // tensors: embed [V, C], norm [max(C, F)] of ones, q, k, v, o, gate, up, down.
  GeneratorWeightSource src;
  src.embed = tensors[0].data();
  src.final_norm = tensors[1].data();
  LayerWeightSource layer;
  layer.attn_norm = layer.mlp_norm = layer.q_norm = layer.k_norm = tensors[1].data();
  LinearWeightSource* lins[7] = {&layer.q, &layer.k, &layer.v, &layer.o, &layer.gate, &layer.up, &layer.down};
  for (int i = 0; i < 7; ++i) lins[i]->f32 = tensors[static_cast<size_t>(2 + i)].data();
  src.layers.assign(static_cast<size_t>(c.n_layers), layer);
  src.lm_head.f32 = tensors[0].data();
  engine->update_weights(src);
  return engine;
}

// The records of one pair of large-preset runs (t: BF16 then FP8 weights).
void emit_large_records(const ModelConfig& c, const std::vector<RunTimes>& t, bool invariant, double bandwidth,
                        int64_t l3, const BenchOptions& options) {
  const int64_t C = c.d_model, F = c.d_ff;
  const Precision precisions[2] = {Precision::kBF16, Precision::kFP8};
  for (int i = 0; i < 2; ++i) {
    const int64_t bytes = linear_weight_bytes(c, precisions[i]);
    const double step = t[static_cast<size_t>(i)].decode_seconds / static_cast<double>(t[static_cast<size_t>(i)].decode_tokens);
    nlohmann::ordered_json r = record(fmt::format("decode_large_{}_weights", precision_name(precisions[i])), c);
    r["batch_invariant"] = invariant;
    r["linear_params"] = (2 * C * c.q_dim() + 2 * C * c.kv_dim() + 3 * C * F) * c.n_layers;
    r["sequences"] = 1;
    r["weight_bytes"] = bytes;
    r["l3_bytes"] = l3;
    r["weights_exceed_l3"] = l3 > 0 && bytes > l3;
    r["seconds"] = step;
    r["tokens_per_s"] = decode_rate(t[static_cast<size_t>(i)]);
    r["weight_gbps"] = static_cast<double>(bytes) / step / 1e9;
    r["limit"] = "read_bandwidth";
    r["limit_gbps"] = bandwidth;
    r["ratio_to_limit"] = static_cast<double>(bytes) / step / 1e9 / bandwidth;
    if (i == 1) r["speedup_vs_bf16_weights"] = decode_rate(t[1]) / decode_rate(t[0]);
    emit(r, options);
  }
}

void run_large_case(const BenchOptions& options, double bandwidth, int64_t l3) {
  const ModelConfig c = model_preset("large", CharTokenizer::kVocabSize);
  const int64_t C = c.d_model, F = c.d_ff;
  const int64_t sizes[9] = {c.vocab_size * C, std::max(C, F), c.q_dim() * C, c.kv_dim() * C, c.kv_dim() * C,
                            C * c.q_dim(),    F * C,          F * C,         C * F};
  std::vector<std::vector<float>> tensors;
  for (int i = 0; i < 9; ++i) {
    tensors.emplace_back(static_cast<size_t>(sizes[i]));
    if (i == 1) {
      std::fill(tensors.back().begin(), tensors.back().end(), 1.0f);
    } else {
      fill_normal(tensors.back().data(), sizes[i], 0.0f, 0.02f, /*seed=*/3, static_cast<uint64_t>(i));
    }
  }
  const auto prompts = random_prompts(1, 16, c.vocab_size, 11);
  const int64_t new_tokens = 8;
  // The engines' default (batch invariant: the trainer's bits), then without invariance, where a
  // lone sequence's GEMVs may run a faster path (on an AMX machine, the AVX-512 kernels).
  for (const bool invariant : {true, false}) {
    auto bf16 = synthetic_engine(c, Precision::kBF16, invariant, tensors);
    auto fp8 = synthetic_engine(c, Precision::kFP8, invariant, tensors);
    const std::vector<RunTimes> t = rounds({[&] { return run_generate(*bf16, prompts, 1, new_tokens); },
                                            [&] { return run_generate(*fp8, prompts, 1, new_tokens); }},
                                           std::min(options.repeats, 3));
    emit_large_records(c, t, invariant, bandwidth, l3, options);
  }
}

// Capacity: one KV budget for both caches, sized to hold the pages of `budget_bf16_sequences`
// sequences of long_context tokens in BF16 (twice as many in FP8); as many prompts as the FP8
// cache holds, each with long_new_tokens new tokens (prompt + response = long_context tokens).
// BF16 linears.
void run_capacity_case(const GenerateBenchSetup& s, const BenchOptions& options) {
  const ModelConfig& c = s.config;
  // A sequence's pages: its prompt's (shared prefix) and its own for the new tokens.
  const int64_t prompt_tokens = s.long_context - s.long_new_tokens;
  const int64_t pages = kv_pages_for(prompt_tokens) + kv_pages_for(s.long_new_tokens);
  const int64_t bf16_page_bytes = KvCache::bytes_per_token(c.n_layers, c.kv_dim(), DType::kBF16) * kPageTokens;
  const int64_t budget = s.budget_bf16_sequences * pages * bf16_page_bytes;
  const int64_t sequences = 2 * s.budget_bf16_sequences;
  auto kv_bf16 = engine_from_trainer(c, Precision::kBF16, DType::kBF16, budget);
  auto kv_fp8 = engine_from_trainer(c, Precision::kBF16, DType::kE4M3, budget);
  const auto prompts = random_prompts(sequences, prompt_tokens, c.vocab_size, 400);
  // Each run prefills every prompt again (seconds); no warm-up round, fewer rounds.
  const std::vector<RunTimes> t = rounds({[&] { return run_generate(*kv_bf16, prompts, 1, s.long_new_tokens); },
                                          [&] { return run_generate(*kv_fp8, prompts, 1, s.long_new_tokens); }},
                                         std::min(options.repeats, 3), /*warm_up=*/false);
  for (int i = 0; i < 2; ++i) {
    const RunTimes& ti = t[static_cast<size_t>(i)];
    const GenerationEngine& e = i == 0 ? *kv_bf16 : *kv_fp8;
    nlohmann::ordered_json r =
        record(fmt::format("decode_ctx{}_kv_budget_{}_kv", s.long_context, i == 0 ? "bf16" : "fp8"), c);
    r["kv_budget_bytes"] = budget;
    r["kv_capacity_tokens"] = e.kv_cache().capacity_tokens();
    r["sequences"] = sequences;
    r["context"] = fmt::format("{}..{}", prompt_tokens, s.long_context - 1);
    r["kv_pages_per_sequence"] = pages;
    r["sequences_in_flight"] = ti.peak_active;
    r["kv_waited"] = ti.kv_waited;
    r["linears"] = "bf16";
    r["kv_cache"] = i == 0 ? "bf16" : "fp8 (fp8 attention)";
    r["seconds"] = ti.decode_seconds;  // decoding all the sequences (prefill not counted)
    r["tokens_per_s"] = decode_rate(ti);
    r["prefill_tokens_per_s"] = prefill_rate(ti);
    if (i == 1) {
      r["speedup_vs_bf16_kv"] = decode_rate(t[1]) / decode_rate(t[0]);
      r["target_speedup"] = 1.5;
    }
    emit(r, options);
  }
}

}  // namespace

void run_generate_bench(const BenchOptions& options, bool quick) {
  for (size_t start = 0; !options.groups.empty() && start <= options.groups.size();) {
    const size_t end = std::min(options.groups.find(',', start), options.groups.size());
    const std::string group = options.groups.substr(start, end - start);
    FP8RL_CHECK(group == "decode" || group == "prefill" || group == "peer" || group == "long" || group == "capacity" ||
                    group == "large",
                "bench generate --cases: unknown group '{}' (known: decode, prefill, peer, long, capacity, large)",
                group);
    start = end + 1;
  }
  const GenerateBenchSetup s = generate_bench_setup(quick, options);
  const ModelConfig& c = s.config;
  const int64_t l3 = l3_cache_bytes();
  const std::string script = find_bench_script("torch_decode.py");
  if (!options.json)
    fmt::print("# generate bench: {} preset (max_seq_len {}), greedy decoding of random prompts, engine clock, "
               "median of {} runs after a warm-up; {} threads; L3 {} MiB; CPU: {}\n",
               c.preset, c.max_seq_len, options.repeats, kernel_threads(), l3 >> 20, cpu_features().describe());
  const double bandwidth = measure_read_bandwidth_gbps(int64_t{quick ? 64 : 1024} << 20, 3);
  emit({{"suite", "generate"}, {"case", "read_bandwidth"}, {"threads", 1}, {"gbps", bandwidth}}, options);

  // Enough KV storage for the largest case: 64 sequences of prompt + new tokens, or the long
  // prompt plus its samples' own pages.
  const int64_t kv_tokens = std::max(64 * (s.prompt_tokens + s.new_tokens + kPageTokens),
                                     s.long_context + s.long_samples * (s.long_new_tokens + kPageTokens)) +
                            4 * kPageTokens;
  const int64_t kv_bytes = kv_tokens * 2 * c.n_layers * c.kv_dim() * 2;
  auto bf16 = engine_from_trainer(c, Precision::kBF16, DType::kBF16, kv_bytes);
  auto fp8 = engine_from_trainer(c, Precision::kFP8, DType::kBF16, kv_bytes);

  // Decode at 1, 8, 64 sequences, BF16 vs FP8 weights.
  double bf16_at_peer = 0, fp8_at_peer = 0;
  const std::vector<int64_t> decode_sequences =  // the peer's comparison needs the decode figures
      options.wants("decode") || options.wants("peer") ? s.sequences : std::vector<int64_t>{};
  for (int64_t n : decode_sequences) {
    const auto prompts = random_prompts(n, s.prompt_tokens, c.vocab_size, 100 + static_cast<uint64_t>(n));
    const std::vector<RunTimes> t = rounds({[&] { return run_generate(*bf16, prompts, 1, s.new_tokens); },
                                            [&] { return run_generate(*fp8, prompts, 1, s.new_tokens); }},
                                           options.repeats);
    for (int i = 0; i < 2; ++i) {
      const Precision p = i == 0 ? Precision::kBF16 : Precision::kFP8;
      const RunTimes& ti = t[static_cast<size_t>(i)];
      const int64_t bytes = linear_weight_bytes(c, p);
      const double steps = static_cast<double>(ti.decode_tokens) / static_cast<double>(n);
      const double passes = static_cast<double>((n + kGemvMaxRows - 1) / kGemvMaxRows);  // weight passes per step
      nlohmann::ordered_json r = record(fmt::format("decode_{}_weights", precision_name(p)), c);
      r["sequences"] = n;
      r["context"] = fmt::format("{}..{}", s.prompt_tokens, s.prompt_tokens + s.new_tokens - 1);
      r["kv_cache"] = "bf16";
      r["weight_bytes"] = bytes;
      r["weights_fit_in_l3"] = l3 > 0 && bytes <= l3;
      r["seconds"] = ti.decode_seconds / steps;  // per decode step
      r["tokens_per_s"] = decode_rate(ti);
      r["weight_gbps"] = static_cast<double>(bytes) * passes * steps / ti.decode_seconds / 1e9;
      r["limit"] = "read_bandwidth";
      r["limit_gbps"] = bandwidth;
      if (i == 1) r["speedup_vs_bf16_weights"] = decode_rate(t[1]) / decode_rate(t[0]);
      if (n == s.peer_sequences) (i == 0 ? bf16_at_peer : fp8_at_peer) = decode_rate(ti);
      emit(r, options);
    }
  }

  // Prefill.
  if (options.wants("prefill")) {
    const auto prompts = random_prompts(s.prefill_prompts, s.prefill_tokens, c.vocab_size, 200);
    const std::vector<RunTimes> t = rounds({[&] { return run_generate(*bf16, prompts, 1, 1); },
                                            [&] { return run_generate(*fp8, prompts, 1, 1); }},
                                           options.repeats);
    for (int i = 0; i < 2; ++i) {
      const Precision p = i == 0 ? Precision::kBF16 : Precision::kFP8;
      nlohmann::ordered_json r = record(fmt::format("prefill_{}_weights", precision_name(p)), c);
      r["prompts"] = fmt::format("{}x{}", s.prefill_prompts, s.prefill_tokens);
      r["seconds"] = t[static_cast<size_t>(i)].prefill_seconds;
      r["tokens_per_s"] = prefill_rate(t[static_cast<size_t>(i)]);
      if (i == 1) r["speedup_vs_bf16_weights"] = prefill_rate(t[1]) / prefill_rate(t[0]);
      emit(r, options);
    }
  }

  // The PyTorch eager baseline at peer_sequences, same prompt and decode lengths.
  if (options.wants("peer") && !script.empty()) {
    const auto lines = run_json_lines(fmt::format(
        "/usr/bin/python3 '{}' {} --threads {} --repeats {} --sequences {} --prompt-tokens {} --new-tokens {}", script,
        torch_model_arguments(c), kernel_threads(), options.repeats, s.peer_sequences, s.prompt_tokens, s.new_tokens));
    if (!lines.empty()) {
      nlohmann::ordered_json peer = lines.front();
      const double peer_rate = peer.value("tokens_per_s", 0.0);
      emit(peer, options);
      for (int i = 0; i < 2; ++i) {
        nlohmann::ordered_json r = record(i == 0 ? "decode_bf16_weights_vs_peer" : "decode_fp8_weights_vs_peer", c);
        r["sequences"] = s.peer_sequences;
        r["tokens_per_s"] = i == 0 ? bf16_at_peer : fp8_at_peer;
        r["peer"] = kPeerName;
        r["peer_tokens_per_s"] = peer_rate;
        r["ratio_to_peer"] = (i == 0 ? bf16_at_peer : fp8_at_peer) / peer_rate;
        emit(r, options);
      }
    }
  } else if (options.wants("peer")) {
    emit({{"suite", "generate"}, {"case", "torch_decode"}, {"peer", "unavailable (tools/bench/torch_decode.py not found)"}},
         options);
  }
  bf16.reset();
  fp8.reset();

  // Long context: G samples of one long prompt (shared pages), BF16 linears, BF16 vs FP8 KV.
  if (options.wants("long")) {
    auto kv_bf16 = engine_from_trainer(c, Precision::kBF16, DType::kBF16, kv_bytes);
    auto kv_fp8 = engine_from_trainer(c, Precision::kBF16, DType::kE4M3, kv_bytes);
    const auto prompts = random_prompts(1, s.long_context, c.vocab_size, 300);
    // Each run prefills the long prompt again (seconds); no warm-up round, fewer rounds.
    const std::vector<RunTimes> t =
        rounds({[&] { return run_generate(*kv_bf16, prompts, s.long_samples, s.long_new_tokens); },
                [&] { return run_generate(*kv_fp8, prompts, s.long_samples, s.long_new_tokens); }},
               std::min(options.repeats, 3), /*warm_up=*/false);
    for (int i = 0; i < 2; ++i) {
      const RunTimes& ti = t[static_cast<size_t>(i)];
      nlohmann::ordered_json r = record(fmt::format("decode_ctx{}_{}_kv", s.long_context, i == 0 ? "bf16" : "fp8"), c);
      r["sequences"] = s.long_samples;
      r["context"] = fmt::format("{}..{}", s.long_context, s.long_context + s.long_new_tokens - 1);
      r["linears"] = "bf16";
      r["kv_cache"] = i == 0 ? "bf16" : "fp8 (fp8 attention)";
      r["kv_bytes_per_token"] = 2 * c.n_layers * c.kv_dim() * (i == 0 ? 2 : 1);
      r["seconds"] = ti.decode_seconds / (static_cast<double>(ti.decode_tokens) / static_cast<double>(s.long_samples));
      r["tokens_per_s"] = decode_rate(ti);
      r["prefill_tokens_per_s"] = prefill_rate(ti);
      if (i == 1) r["speedup_vs_bf16_kv"] = decode_rate(t[1]) / decode_rate(t[0]);
      emit(r, options);
    }
  }

  if (options.wants("capacity")) run_capacity_case(s, options);

  if (options.wants("large") && s.large) {
    run_large_case(options, bandwidth, l3);
  } else if (options.wants("large")) {
    emit({{"suite", "generate"}, {"case", "decode_large"}, {"skipped", quick ? "--quick" : "a model shape was given"}}, options);
  }
}

}  // namespace fp8rl::bench
