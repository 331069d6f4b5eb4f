// Shared plumbing of the `fp8rl bench <suite>` commands: timing with warm-up and medians, the
// machine limits every figure is compared against, and one output line per case (a JSON object
// with --json, a readable line otherwise).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fp8rl::bench {

struct BenchOptions {
  bool json = false;
  int repeats = 5;    // timed runs per case after one warm-up run
  int64_t mib = 256;  // working-set size of the streaming cases
  // bench generate: the groups of cases to run, comma-separated (decode, prefill, peer, long,
  // capacity, large); empty: all of them.
  std::string groups;
  // bench model / generate: the model's shape, a preset (arch/config.h: e.g. qwen3-0.6b) or a
  // Hugging Face directory's config.json (random weights either way: speed does not depend on the
  // values); empty: the suite's own preset. bench model: the batch, sequences x tokens (0: the
  // suite's default), and activation checkpointing.
  std::string preset, model_dir;
  int64_t batch = 0, seq = 0;
  bool checkpointing = false;
  bool wants(const std::string& group) const;
};

double median(std::vector<double> values);

// A compute limit from several runs of a register-only loop: the fastest run. Nothing makes such a
// loop faster than the hardware, while a neighbour on the host or a shared core slows some runs
// (a median of 3 ranged over 381-503 GFLOP/s between minutes on one VM, and the ratio to the
// limit with it).
double fastest(const std::vector<double>& gflops_runs);

// Runs `fn` once to warm up, then `repeats` times; returns the median wall time in seconds.
double time_median(const std::function<void()>& fn, int repeats);

// Streaming read bandwidth of this machine in GB/s (1e9 bytes/s), one thread, measured over a
// buffer of `bytes` (median of `repeats` passes after a warm-up pass).
double measure_read_bandwidth_gbps(int64_t bytes, int repeats);

// Streaming write bandwidth in GB/s, one thread: plain (cached) stores over `bytes`.
double measure_write_bandwidth_gbps(int64_t bytes, int repeats);

// Prints one record: `{"suite": ..., "case": ..., ...}` with --json, else "suite/case  k=v ...".
void emit(const nlohmann::ordered_json& record, const BenchOptions& options);

}  // namespace fp8rl::bench
