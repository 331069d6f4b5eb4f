// `fp8rl bench model`: training throughput of the trainer (forward + backward + AdamW step, the
// work of one sft_step) in tokens/s, BF16 and FP8 linears, one thread and two, against the same
// model and batch in PyTorch (BF16 autocast on CPU, eager, torch.optim.AdamW) measured in the
// same run, and against the peak of the GEMM path in use (AMX tiles, vdpbf16ps or AVX2 FMAs).
// On AVX-512 levels the peer runs twice: as PyTorch runs by default (its oneDNN uses AMX tiles on
// a CPU that has them) and limited to AVX-512 BF16 like our kernels. On the AVX2 level it runs
// limited to AVX2 (ATEN_CPU_CAPABILITY, ONEDNN_MAX_CPU_ISA), with BF16 autocast and in FP32, and
// the faster of the two is the peer (peer_variants below).
//
// The kernels take their thread count from the process-wide pool (FP8RL_NUM_THREADS, read once
// at start-up; core/thread_pool.h), so each thread count runs in a child process of this binary
// (FP8RL_BENCH_MODEL_CHILD set) with FP8RL_NUM_THREADS = 1 or 2. The child times BF16 and FP8
// steps alternately (one of each per round), so their ratio is not skewed by a change of machine
// load. The PyTorch peer (tools/bench/torch_train_step.py) runs right after with
// torch.set_num_threads matching.
//
// Mixture of Experts: a Qwen3-MoE shape (--preset small-moe, or a qwen3_moe config.json) runs the
// same way, and the peer gets the MoE shape too (torch_moe_arguments): its sparse layers are HF's
// eager per-expert loop (FP32 router, top-k, gather, SwiGLU, index_add). Without --preset or
// --model the suite runs its own two shapes: `medium` (dense, 8 x 256), then `small-moe` (2 x 512;
// `tiny` and `tiny-moe` at 2 x 32 with --quick). Every record says which MLP it measured ("mlp",
// and for MoE "experts", "experts_per_token", "d_expert", "rows_per_expert").
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_suites.h"
#include "core/check.h"
#include "core/cpu_features.h"
#include "core/memory.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "arch/config.h"
#include "model/hf_config.h"
#include "model/optimizer.h"
#include "model/transformer.h"
#include "rl/sft.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl::bench {

double peak_bf16_dot_gflops(int64_t iterations);  // bench_kernels.cc
double peak_amx_bf16_gflops(int64_t iterations);  // bench_kernels.cc
double peak_fma_avx2_gflops(int64_t iterations);  // bench_kernels.cc

// ---- helpers shared with bench_generate.cc (declared in bench_suites.h) ----------------------

std::vector<nlohmann::ordered_json> run_json_lines(const std::string& command) {
  std::vector<nlohmann::ordered_json> records;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (pipe == nullptr) return records;
  std::array<char, 16384> line{};
  while (std::fgets(line.data(), static_cast<int>(line.size()), pipe.get()) != nullptr) {
    const auto record = nlohmann::ordered_json::parse(line.data(), nullptr, /*allow_exceptions=*/false);
    if (!record.is_discarded() && record.is_object()) records.push_back(record);
  }
  return records;
}

std::string self_executable() {
  std::array<char, 4096> exe{};
  const ssize_t len = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  return len > 0 ? std::string(exe.data(), static_cast<size_t>(len)) : std::string();
}

std::string find_bench_script(const std::string& name) {
  namespace fs = std::filesystem;
  std::vector<fs::path> roots;
  const std::string exe = self_executable();
  if (!exe.empty()) roots.push_back(fs::path(exe).parent_path().parent_path());  // build*/fp8rl -> repo
  roots.push_back(fs::current_path());
  for (const fs::path& root : roots) {
    const fs::path p = root / "tools" / "bench" / name;
    std::error_code ec;
    if (fs::is_regular_file(p, ec)) return p.string();
  }
  return {};
}

std::string torch_model_arguments(const ModelConfig& c) {
  return fmt::format(
      "--vocab {} --d-model {} --layers {} --heads {} --kv-heads {} --head-dim {} --d-ff {} "
      "--max-seq-len {} --rope-theta {}{}{}",
      c.vocab_size, c.d_model, c.n_layers, c.n_heads, c.n_kv_heads, c.head_dim, c.d_ff, c.max_seq_len, c.rope_theta,
      c.qk_norm ? " --qk-norm" : "", c.tie_embeddings ? "" : " --untied");
}

int kernel_threads() { return std::min(kernel_thread_pool().size(), hardware_threads()); }

std::vector<double> time_interleaved(const std::vector<std::function<void()>>& fns, int repeats,
                                     std::vector<GemmTotals>* gemm) {
  for (const auto& fn : fns) fn();  // warm-up
  const int rounds = std::max(1, repeats);
  std::vector<std::vector<double>> times(fns.size());
  std::vector<GemmTotals> totals(fns.size());
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < fns.size(); ++i) {
      const GemmTotals before = gemm_totals();
      const Timer t;
      fns[i]();
      times[i].push_back(t.seconds());
      const GemmTotals d = gemm_totals() - before;
      totals[i] = GemmTotals{totals[i].calls + d.calls, totals[i].flops + d.flops, totals[i].seconds + d.seconds};
    }
  if (gemm != nullptr) {
    gemm->clear();
    for (const GemmTotals& t : totals)
      gemm->push_back(GemmTotals{t.calls / rounds, t.flops / rounds, t.seconds / rounds});
  }
  std::vector<double> medians;
  for (auto& t : times) medians.push_back(median(t));
  return medians;
}

namespace {

constexpr int kThreadCounts[] = {1, 2};
constexpr const char* kPeerName = "torch_bf16_autocast";

// The MoE flags of tools/bench/torch_train_step.py (empty for a dense model). Kept apart from
// torch_model_arguments, whose flags torch_decode.py takes too.
std::string torch_moe_arguments(const ModelConfig& c) {
  if (!c.is_moe()) return {};
  std::string layers;
  for (int64_t l : c.mlp_only_layers) layers += fmt::format("{}{}", layers.empty() ? "" : ",", l);
  return fmt::format(" --moe-experts {} --moe-top-k {} --moe-d-expert {} --moe-sparse-step {}{}{}", c.num_experts,
                     c.experts_per_token, c.d_expert, c.decoder_sparse_step,
                     c.norm_topk_prob ? "" : " --moe-no-norm-topk",
                     layers.empty() ? "" : " --moe-mlp-only-layers " + layers);
}

// The MLP of the records: dense (d_ff), or the MoE shape and the mean rows of one expert's GEMM
// (tokens x k / E: each expert runs its gate, up and down over the tokens routed to it).
void add_mlp_fields(nlohmann::ordered_json& r, const ModelConfig& c, int64_t tokens) {
  if (!c.is_moe()) {
    r["mlp"] = "dense";
    r["d_ff"] = c.d_ff;
    return;
  }
  r["mlp"] = "moe";
  r["experts"] = c.num_experts;
  r["experts_per_token"] = c.experts_per_token;
  r["d_expert"] = c.d_expert;
  r["norm_topk_prob"] = c.norm_topk_prob;
  r["moe_layers"] = c.num_moe_layers();
  r["rows_per_expert"] = static_cast<double>(tokens * c.experts_per_token) / static_cast<double>(c.num_experts);
}

std::string mlp_description(const ModelConfig& c, int64_t tokens) {
  if (!c.is_moe()) return fmt::format("dense MLP d_ff {}", c.d_ff);
  return fmt::format("MoE MLP in {} of {} layers: {} experts, top-{}, d_expert {}, about {} rows per expert GEMM",
                     c.num_moe_layers(), c.n_layers, c.num_experts, c.experts_per_token, c.d_expert,
                     tokens * c.experts_per_token / c.num_experts);
}

// The benchmark's model and batch: `medium` at 8 x 256 tokens, `tiny` at 2 x 32 (--quick), or
// the shape of --preset / --model at 2 x 512 (--batch, --seq override either).
struct ModelBenchSetup {
  ModelConfig config;
  int64_t B = 0, T = 0;
  // A model of real size (over 100 M parameters): its cases run one model at a time (two of them
  // with their AdamW state would not fit in memory), and without the FP32-attention case.
  bool one_at_a_time = false;
};

ModelBenchSetup model_bench_setup(bool quick, const BenchOptions& o) {
  ModelBenchSetup s;
  if (!o.model_dir.empty()) {
    s.config = load_model_config(o.model_dir);
  } else {
    s.config = model_preset(o.preset.empty() ? (quick ? "tiny" : "medium") : o.preset, CharTokenizer::kVocabSize);
  }
  const bool own_preset = o.model_dir.empty() && o.preset.empty();
  s.B = o.batch > 0 ? o.batch : quick ? 2 : own_preset ? 8 : 2;
  s.T = o.seq > 0 ? o.seq : quick ? 32 : own_preset ? 256 : 512;
  s.config.max_seq_len = std::max(s.config.max_seq_len, s.T + 1);
  s.one_at_a_time = ParamLayout(s.config).numel() > 100'000'000;
  return s;
}

// The flags that make a child process run this setup.
std::string setup_flags(const BenchOptions& o) {
  std::string f;
  if (!o.preset.empty()) f += fmt::format(" --preset '{}'", o.preset);
  if (!o.model_dir.empty()) f += fmt::format(" --model '{}'", o.model_dir);
  if (o.batch > 0) f += fmt::format(" --batch {}", o.batch);
  if (o.seq > 0) f += fmt::format(" --seq {}", o.seq);
  if (o.checkpointing) f += " --checkpointing";
  return f;
}

// Parameters of the linears a token goes through (q, k, v, o, gate, up, down and the LM head;
// in an MoE layer the router and its k experts' gate, up and down): 6 flops per parameter per
// token for forward + backward. Attention's own flops are not counted.
double linear_params(const ModelConfig& c) {
  const double C = static_cast<double>(c.d_model), F = static_cast<double>(c.d_ff);
  const double attention = C * static_cast<double>(c.q_dim()) * 2 + C * static_cast<double>(c.kv_dim()) * 2;
  const double moe_mlp = C * static_cast<double>(c.num_experts) +
                         static_cast<double>(c.experts_per_token) * 3 * C * static_cast<double>(c.d_expert);
  double total = static_cast<double>(c.vocab_size) * C;
  for (int64_t l = 0; l < c.n_layers; ++l) total += attention + (c.is_moe_layer(l) ? moe_mlp : 3 * C * F);
  return total;
}

// The causal attention's products per token of a T-token sequence, forward and backward: S = Q K^T
// and P V forward, dV, dP, dQ and dK backward, 2 flops per multiply-add over the T (T + 1) / 2
// (query, key) pairs of each query head; the probabilities the backward recomputes are not
// counted, as no recomputation is.
double attention_flops_per_token(const ModelConfig& c, int64_t T) {
  const double pairs_per_token = static_cast<double>(T + 1) / 2;
  return 6 * 2 * pairs_per_token * static_cast<double>(c.head_dim * c.n_heads) * static_cast<double>(c.n_layers);
}

// Child side: BF16 and FP8 training steps at the pool's thread count, timed alternately.
void run_model_child(const BenchOptions& options, bool quick) {
  const ModelBenchSetup s = model_bench_setup(quick, options);
  const int threads = kernel_threads();
  // Random tokens 3..V-1 (no pad/bos/eos); every row is scored on the token that follows it.
  TokenBatch batch = TokenBatch::empty(s.B, s.T, CharTokenizer::kPad);
  const uint32_t V = static_cast<uint32_t>(s.config.vocab_size);
  auto token = [&](int64_t b, int64_t t) {
    return 3 + static_cast<int32_t>(random_u32(7, static_cast<uint64_t>(b), static_cast<uint64_t>(t)) % (V - 3));
  };
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t t = 0; t < s.T; ++t) {
      batch.tokens[static_cast<size_t>(b * s.T + t)] = token(b, t);
      batch.targets[static_cast<size_t>(b * s.T + t)] = token(b, t + 1);
    }

  // The GRPO presets' policies (BF16 attention) with BF16 and FP8 linears, then BF16 linears with
  // FP32 attention, what BF16 attention saves.
  struct Case {
    const char* name;
    Precision linear, attention;
  };
  std::vector<Case> cases = {{"train_step_bf16", Precision::kBF16, Precision::kBF16},
                             {"train_step_fp8", Precision::kFP8, Precision::kBF16},
                             {"train_step_bf16_fp32_attention", Precision::kBF16, Precision::kF32}};
  if (s.one_at_a_time) cases.pop_back();
  struct Trainee {
    std::unique_ptr<Transformer> model;
    std::unique_ptr<AdamW> optimizer;
  };
  auto make = [&](const Case& c) {
    PrecisionPolicy policy;
    policy.linear = c.linear;
    policy.attention = c.attention;
    Trainee t{std::make_unique<Transformer>(s.config, policy), nullptr};
    t.model->init_random(/*seed=*/1);
    t.model->set_activation_checkpointing(options.checkpointing);
    t.optimizer = std::make_unique<AdamW>(t.model->layout(), AdamWConfig{});
    return t;
  };
  // The compute limit of the GEMM path in use: AMX tile products, vdpbf16ps, or the AVX2 level's
  // FP32 FMAs (its BF16 and FP8 operands are widened to FP32 while packing). Measured before the
  // cases and again after them, the fastest of all the runs: a shared host slows down and speeds
  // up over minutes, and a limit taken in a slow moment alone would flatter every ratio.
  const Isa level = resolve_isa(Isa::kAuto);
  const char* limit = level == Isa::kAmx    ? "peak_amx_bf16 x threads"
                      : uses_avx512(level)  ? "peak_bf16_dot x threads"
                      : level == Isa::kAvx2 ? "peak_fma_avx2 x threads"
                                            : nullptr;
  std::vector<double> peak_runs;
  const auto measure_peak = [&] {
    if (!limit) return;
    for (int i = 0; i < 5; ++i)
      peak_runs.push_back(level == Isa::kAmx    ? peak_amx_bf16_gflops(quick ? 20'000 : 300'000)
                          : level == Isa::kAvx2 ? peak_fma_avx2_gflops(quick ? 2'000'000 : 20'000'000)
                                                : peak_bf16_dot_gflops(quick ? 200'000 : 3'000'000));
  };
  measure_peak();
  std::vector<double> seconds;
  std::vector<GemmTotals> gemm;  // per step, each case's
  std::vector<double> peak_rss;  // GiB after each case (one_at_a_time)
  if (s.one_at_a_time) {  // each case alone: build, warm up and time it, free it
    for (const Case& c : cases) {
      Trainee t = make(c);
      std::vector<GemmTotals> one;
      seconds.push_back(
          time_interleaved({[&] { sft_step(*t.model, *t.optimizer, batch, 1e-4); }}, options.repeats, &one)[0]);
      gemm.push_back(one[0]);
      peak_rss.push_back(gib(peak_rss_bytes()));
    }
  } else {
    std::vector<Trainee> trainees;
    std::vector<std::function<void()>> steps;
    for (const Case& c : cases) trainees.push_back(make(c));
    for (Trainee& t : trainees) steps.push_back([&t, &batch] { sft_step(*t.model, *t.optimizer, batch, 1e-4); });
    seconds = time_interleaved(steps, options.repeats, &gemm);
  }
  const int64_t num_params = ParamLayout(s.config).numel();
  measure_peak();
  const double peak = peak_runs.empty() ? 0.0 : fastest(peak_runs);

  const double tokens = static_cast<double>(s.B * s.T);
  for (size_t i = 0; i < seconds.size(); ++i) {
    const double gflops = 6.0 * linear_params(s.config) * tokens / seconds[i] / 1e9;
    // The model's flops with attention's (what "model FLOPs utilization" counts).
    const double model_gflops = gflops + attention_flops_per_token(s.config, s.T) * tokens / seconds[i] / 1e9;
    nlohmann::ordered_json r = {{"suite", "model"},
                                {"case", cases[i].name},
                                {"attention", precision_name(cases[i].attention)},
                                {"preset", s.config.preset},
                                {"batch", fmt::format("{}x{}", s.B, s.T)}};
    add_mlp_fields(r, s.config, s.B * s.T);
    r.update(nlohmann::ordered_json{{"params", num_params},
                                    {"activation_checkpointing", options.checkpointing},
                                    {"threads", threads},
                                    {"seconds", seconds[i]},
                                    {"tokens_per_s", tokens / seconds[i]},
                                    {"linear_gflops", gflops},
                                    {"model_gflops", model_gflops}});
    // The GEMMs' own rate inside the step: every product they ran (the LM head's logits again in
    // its backward included) over the time spent in them.
    const GemmTotals& g = gemm[i];
    const double gemm_gflops = g.seconds > 0 ? g.flops / g.seconds / 1e9 : 0.0;
    r.update(nlohmann::ordered_json{
        {"gemm_share", g.seconds / seconds[i]}, {"gemm_calls", g.calls}, {"gemm_gflops", gemm_gflops}});
    if (peak > 0) {
      r["limit"] = limit;
      r["limit_gflops"] = peak * threads;
      r["ratio_to_limit"] = gflops / (peak * threads);
      r["model_ratio_to_limit"] = model_gflops / (peak * threads);
      r["gemm_ratio_to_limit"] = gemm_gflops / (peak * threads);
    }
    r["isa"] = isa_name(resolve_isa(Isa::kAuto));
    if (!peak_rss.empty()) r["peak_rss_gib"] = peak_rss[i];  // the process's peak so far (cases in order)
    fmt::print("{}\n", r.dump());
  }
  std::fflush(stdout);
}

// One run of the PyTorch peer: environment prefix, --precision, and the label of its ISA limit.
// `second_peer`: reported beside the peer (the AVX-512-limited run on AVX-512 machines).
// `batch`: sequences per step (0: the bench's own batch). Debian's PyTorch does FP32 matmuls in
// its generic reference BLAS (about 3 GFLOP/s), so its FP32 step of the full batch takes minutes:
// that variant runs one sequence, once after the warm-up (a rate that does not depend on the
// batch at that speed; the record's "tokens" field says how many were timed).
struct PeerVariant {
  const char* env;
  const char* precision;
  const char* isa_limit;
  bool second_peer;
  int64_t batch;
  int repeats;  // 0: the bench's --repeats
};

std::vector<PeerVariant> peer_variants(bool avx2_or_below) {
  if (avx2_or_below)
    return {{"ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ", "bf16", "avx2", false, 0, 0},
            {"ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 ", "fp32", "avx2", false, 1, 1}};
  return {{"", "bf16", "default", false, 0, 0},
          {"ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 ", "bf16", "avx512_core_bf16", true, 0, 0}};
}

}  // namespace

// One shape: our cases at 1 and 2 threads (child processes), each thread count followed by the peer.
static void run_model_shape(const BenchOptions& options, bool quick) {
  const bool avx2_or_below = !uses_avx512(resolve_isa(Isa::kAuto));
  const ModelBenchSetup s = model_bench_setup(quick, options);
  const size_t num_cases = s.one_at_a_time ? 2 : 3;
  const std::string exe = self_executable(), script = find_bench_script("torch_train_step.py");
  if (!options.json)
    fmt::print(
        "# model bench: {} preset ({}), {} x {} tokens per step (forward + backward + AdamW), median of {} "
        "steps after a warm-up; peer: PyTorch eager, BF16 autocast ({}); CPU: {}\n",
        s.config.preset, mlp_description(s.config, s.B * s.T), s.B, s.T, options.repeats,
        script.empty() ? "script not found" : script, cpu_features().describe());
  for (int threads : kThreadCounts) {
    const std::vector<nlohmann::ordered_json> ours = run_json_lines(
        fmt::format("FP8RL_NUM_THREADS={} FP8RL_BENCH_MODEL_CHILD=1 '{}' bench model --json --repeats {}{}{}", threads,
                    exe, options.repeats, quick ? " --quick" : "", setup_flags(options)));
    FP8RL_CHECK(ours.size() == num_cases, "bench model: the child process with {} threads printed {} records, expected {}",
                threads, ours.size(), num_cases);
    // The peer as it runs by default (oneDNN picks AMX where the CPU has it) and limited to
    // AVX-512 BF16, the instruction set of our kernels (ONEDNN_MAX_CPU_ISA). On the AVX2 level
    // (or below) the peer is limited to AVX2 instead (ATEN_CPU_CAPABILITY as well), and runs both
    // BF16 autocast and plain FP32: the faster one is the peer (without AVX-512 BF16, autocast
    // often loses to FP32).
    nlohmann::ordered_json peer, peer_avx512;
    if (!script.empty()) {
      for (const PeerVariant& v : peer_variants(avx2_or_below)) {
        const auto lines = run_json_lines(
            fmt::format("{}/usr/bin/python3 '{}' {}{} --threads {} --repeats {} --batch {} --seq {} --precision {}",
                        v.env, script, torch_model_arguments(s.config), torch_moe_arguments(s.config), threads,
                        v.repeats > 0 ? v.repeats : options.repeats, v.batch > 0 ? v.batch : s.B, s.T, v.precision));
        if (lines.empty()) continue;
        nlohmann::ordered_json p = lines.front();
        p["preset"] = s.config.preset;
        add_mlp_fields(p, s.config, s.B * s.T);
        p["isa_limit"] = v.isa_limit;
        emit(p, options);
        if (p.contains("error")) continue;  // this variant cannot run under these limits
        if (v.second_peer) {
          peer_avx512 = p;
        } else if (peer.is_null() || p.value("tokens_per_s", 0.0) > peer.value("tokens_per_s", 0.0)) {
          peer = p;
        }
      }
    }
    const double bf16_tokens = ours[0].value("tokens_per_s", 0.0);
    for (nlohmann::ordered_json r : ours) {
      if (r.value("case", "") != "train_step_bf16") r["ratio_to_bf16"] = r.value("tokens_per_s", 0.0) / bf16_tokens;
      if (peer.is_null()) {
        r["peer"] = "unavailable (tools/bench/torch_train_step.py or /usr/bin/python3 with torch not found)";
      } else {
        r["peer"] =
            peer.value("impl", std::string(kPeerName)) + ", isa " + peer.value("isa_limit", std::string("default"));
        r["peer_tokens_per_s"] = peer.value("tokens_per_s", 0.0);
        r["ratio_to_peer"] = r.value("tokens_per_s", 0.0) / peer.value("tokens_per_s", 1.0);
      }
      if (!peer_avx512.is_null()) {
        r["peer_tokens_per_s_avx512"] = peer_avx512.value("tokens_per_s", 0.0);
        r["ratio_to_peer_avx512"] = r.value("tokens_per_s", 0.0) / peer_avx512.value("tokens_per_s", 1.0);
      }
      emit(r, options);
    }
  }
}

void run_model_bench(const BenchOptions& options, bool quick) {
  if (std::getenv("FP8RL_BENCH_MODEL_CHILD") != nullptr) {
    run_model_child(options, quick);
    return;
  }
  run_model_shape(options, quick);
  // The suite's own shapes: the dense preset above, then an MoE model (Qwen3-MoE: `small-moe`, 8
  // experts, 2 per token, at 2 x 512 tokens as `--preset small-moe` runs it; about 30 s), whose
  // peer runs HF's eager per-expert loop.
  if (options.preset.empty() && options.model_dir.empty()) {
    BenchOptions moe = options;
    moe.preset = quick ? "tiny-moe" : "small-moe";
    run_model_shape(moe, quick);
  }
}

}  // namespace fp8rl::bench
