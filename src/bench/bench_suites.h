// Entry points of the benchmark suites run by `fp8rl bench <suite>`.
#pragma once

#include "bench/bench_report.h"

namespace fp8rl::bench {

// E4M3 / BF16 codecs and the blockwise quantizers on a large FP32 input, one thread.
void run_numerics_bench(const BenchOptions& options);

// GEMM and decode GEMV against the vdpbf16ps peak, the read bandwidth and oneDNN (bench_kernels.cc).
void run_kernels_bench(const BenchOptions& options);

}  // namespace fp8rl::bench
