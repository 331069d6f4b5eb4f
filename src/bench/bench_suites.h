// Entry points of the benchmark suites run by `fp8rl bench <suite>`.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "bench/bench_report.h"
#include "kernels/gemm/gemm.h"
#include "arch/config.h"

namespace fp8rl::bench {

// E4M3 / BF16 codecs and the blockwise quantizers on a large FP32 input, one thread.
void run_numerics_bench(const BenchOptions& options);

// GEMM and decode GEMV against the vdpbf16ps peak, the read bandwidth and oneDNN where the build
// has it (bench_kernels.cc).
void run_kernels_bench(const BenchOptions& options);

// Training tokens/s (forward + backward + AdamW) of the `medium` preset, then of the `small-moe`
// (Qwen3-MoE) preset, BF16 and FP8, 1 and 2 threads, against PyTorch (bench_model.cc; with a
// --preset or --model, that shape alone). `quick`: `tiny` and `tiny-moe` at a small batch (smoke test).
void run_model_bench(const BenchOptions& options, bool quick);

// Generator decode and prefill tokens/s, BF16/FP8 weights and KV cache, against a PyTorch eager
// KV-cached loop (bench_generate.cc). `quick`: the `tiny` preset, short sequences, no `large` case.
void run_generate_bench(const BenchOptions& options, bool quick);

// Peak memory of one training step against sequence length (bench_memory.cc); with `check`,
// returns 1 when it grows faster than linearly (the test suite's bound), else 0.
int run_memory_bench(const BenchOptions& options, bool check);

// GRPO step time with a Python reward plug-in (4 workers) against the built-in verifier, 256
// samples per step, and one sandboxed Python program's wall time (bench_reward.cc).
void run_reward_bench(const BenchOptions& options);

// Helpers of the suites with subprocess peers (bench_model.cc).
// Runs `command` with popen and returns the JSON objects it printed, one per line (other lines
// are ignored; stderr passes through).
std::vector<nlohmann::ordered_json> run_json_lines(const std::string& command);
// This binary's path (/proc/self/exe).
std::string self_executable();
// tools/bench/NAME next to the build directory of this binary, or under the current directory;
// empty if not found.
std::string find_bench_script(const std::string& name);
// The architecture flags of tools/bench/torch_llama.py for `config`.
std::string torch_model_arguments(const ModelConfig& config);
// Threads the kernels use when asked for all of them (min(pool size, hardware threads)).
int kernel_threads();
// Runs each function once (warm-up), then `repeats` rounds of all of them in turn; returns the
// median wall time of each, in seconds. With `gemm`, also what the GEMMs of each function did per
// round (kernels/gemm/gemm.h's totals over its timed rounds, divided by the rounds).
std::vector<double> time_interleaved(const std::vector<std::function<void()>>& fns, int repeats,
                                     std::vector<GemmTotals>* gemm = nullptr);

}  // namespace fp8rl::bench
