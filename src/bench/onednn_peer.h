// oneDNN's matmul, the peer of the GEMM lines of `fp8rl bench kernels` (bench_kernels.cc runs it
// in child processes of this binary). oneDNN is optional: onednn_peer.cc is compiled only where
// CMake found it, and then FP8RL_HAVE_ONEDNN=1 is defined for fp8rl_bench.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8rl::bench {

// One shape's figure: the median wall time and the implementation oneDNN picked.
struct OnednnMatmulTime {
  double seconds = 0.0;
  std::string impl;
};

#if FP8RL_HAVE_ONEDNN
inline constexpr bool kHaveOnednn = true;

// Limits oneDNN to `isa_limit` ("default": no limit, "avx512_core_bf16", or "avx2": the matmul in
// FP32 instead, AVX2 has no BF16 arithmetic), then times its matmul C[M,N] (f32) = A[M,K] . B[N,K]^T
// (A row-major, B row-major [N,K], i.e. the weights' "ba" layout, as the model's fprop calls it;
// BF16 operands) on each {M, N, K} of `shapes`: the median of `repeats` runs after a warm-up. The ISA
// limit can be set only once per process, before any primitive exists: one call per process.
std::vector<OnednnMatmulTime> time_onednn_matmuls(const std::string& isa_limit,
                                                  const std::vector<std::array<int64_t, 3>>& shapes, int repeats);
#else
inline constexpr bool kHaveOnednn = false;

// This build has no oneDNN: no figures.
inline std::vector<OnednnMatmulTime> time_onednn_matmuls(const std::string&, const std::vector<std::array<int64_t, 3>>&,
                                                         int) {
  return {};
}
#endif

}  // namespace fp8rl::bench
