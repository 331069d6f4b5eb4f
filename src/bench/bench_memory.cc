// `fp8rl bench memory`: how the trainer's peak memory grows with sequence length. For each length
// T (default 512, 1024, 2048, 4096) a child process of this binary runs one training step (forward,
// backward, AdamW) of one sequence of T tokens and reports its peak resident set; the parent prints
// each peak, the increment over the previous length, and the ratio of successive increments: about
// 2 when memory is linear in T (each doubling adds twice the previous increment), about 4 when it
// is quadratic (a stored [T, T] attention matrix). `--check` exits with status 1 when a ratio is
// above 2.2, the bound the test suite holds the trainer to.
//
// The model is --preset (default `small`) or --model DIR's shape, random weights; BF16 linears
// and the presets' BF16 attention; --checkpointing for per-layer recomputation.
#include <fmt/format.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "bench/bench_suites.h"
#include "core/check.h"
#include "core/memory.h"
#include "core/rng.h"
#include "model/hf_config.h"
#include "model/optimizer.h"
#include "model/transformer.h"
#include "rl/sft.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl::bench {
namespace {

constexpr double kMaxIncrementRatio = 2.2;

ModelConfig memory_bench_config(const BenchOptions& o, int64_t longest) {
  ModelConfig c = o.model_dir.empty() ? model_preset(o.preset.empty() ? "small" : o.preset, CharTokenizer::kVocabSize)
                                      : load_model_config(o.model_dir);
  c.max_seq_len = std::max(c.max_seq_len, longest);
  return c;
}

// Child side: one training step at 1 x T, then the process's peak RSS.
void run_memory_child(const BenchOptions& o, int64_t T) {
  const ModelConfig c = memory_bench_config(o, T);
  PrecisionPolicy policy;
  policy.linear = Precision::kBF16;
  policy.attention = Precision::kBF16;
  Transformer model(c, policy);
  model.init_random(1);
  model.set_activation_checkpointing(o.checkpointing);
  AdamW optimizer(model.layout(), AdamWConfig{});
  TokenBatch batch = TokenBatch::empty(1, T, CharTokenizer::kPad);
  const uint32_t V = static_cast<uint32_t>(c.vocab_size);
  for (int64_t t = 0; t < T; ++t) {
    batch.tokens[static_cast<size_t>(t)] = 3 + static_cast<int32_t>(random_u32(3, 0, static_cast<uint64_t>(t)) % (V - 3));
    if (t + 1 < T) batch.targets[static_cast<size_t>(t)] = 3 + static_cast<int32_t>(random_u32(3, 0, static_cast<uint64_t>(t + 1)) % (V - 3));
  }
  const int64_t before = current_rss_bytes();
  sft_step(model, optimizer, {batch}, 1e-4);
  nlohmann::ordered_json r = {{"suite", "memory"},
                              {"case", "train_step_peak_rss"},
                              {"preset", c.preset},
                              {"seq", T},
                              {"activation_checkpointing", o.checkpointing},
                              {"params", model.num_params()},
                              {"rss_before_step_gib", gib(before)},
                              {"peak_rss_gib", gib(peak_rss_bytes())}};
  fmt::print("{}\n", r.dump());
}

std::vector<int64_t> lengths_of(const BenchOptions& o) {
  if (o.seq > 0) return {o.seq / 8, o.seq / 4, o.seq / 2, o.seq};
  return {512, 1024, 2048, 4096};
}

}  // namespace

int run_memory_bench(const BenchOptions& options, bool check) {
  if (const char* t = std::getenv("FP8RL_BENCH_MEMORY_CHILD")) {
    run_memory_child(options, std::atoll(t));
    return 0;
  }
  const std::string exe = self_executable();
  std::string flags;
  if (!options.preset.empty()) flags += fmt::format(" --preset '{}'", options.preset);
  if (!options.model_dir.empty()) flags += fmt::format(" --model '{}'", options.model_dir);
  if (options.checkpointing) flags += " --checkpointing";
  double previous_peak = 0, previous_increment = 0;
  bool linear = true;
  const std::vector<int64_t> lengths = lengths_of(options);
  for (size_t i = 0; i < lengths.size(); ++i) {
    const auto lines =
        run_json_lines(fmt::format("FP8RL_BENCH_MEMORY_CHILD={} '{}' bench memory{}", lengths[i], exe, flags));
    FP8RL_CHECK(lines.size() == 1, "bench memory: the child for T = {} printed {} records, expected 1", lengths[i],
                lines.size());
    nlohmann::ordered_json r = lines.front();
    const double peak = r.value("peak_rss_gib", 0.0);
    if (i > 0) {
      const double increment = peak - previous_peak;
      r["increment_gib"] = increment;
      if (i > 1) {
        const double ratio = increment / previous_increment;
        r["increment_ratio"] = ratio;  // 2: linear in T; 4: quadratic
        r["limit_increment_ratio"] = kMaxIncrementRatio;
        linear = linear && ratio <= kMaxIncrementRatio;
      }
      previous_increment = increment;
    }
    previous_peak = peak;
    emit(r, options);
  }
  if (check && !linear) {
    fmt::print(stderr, "bench memory: peak memory grows faster than linearly in the sequence length "
                       "(an increment ratio above {})\n", kMaxIncrementRatio);
    return 1;
  }
  return 0;
}

}  // namespace fp8rl::bench
