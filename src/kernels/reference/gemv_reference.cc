#include "kernels/reference/gemv_reference.h"

#include <algorithm>

#include "core/check.h"
#include "numerics/e4m3.h"

namespace fp8rl::reference {

void gemm_nt_bf16_fp8w(int64_t M, const bf16_t* x, int64_t ldx, const QuantizedMatrix& W, float* y, int64_t ldy) {
  FP8RL_CHECK(W.mode == ScalingMode::kRows1x128 || W.mode == ScalingMode::kBlocks128x128,
              "bf16 x fp8 gemm: W must be quantized along K, got {}", W.str());
  const int64_t N = W.rows, K = W.cols;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += kQuantBlock) {
        float slice = 0.0f;
        for (int64_t k = k0; k < std::min(K, k0 + kQuantBlock); ++k)
          slice += bf16_to_f32(x[m * ldx + k]) * e4m3_to_f32(W.codes[static_cast<size_t>(n * K + k)]);
        acc += slice * W.scale_at(n, k0);
      }
      y[m * ldy + n] = acc;
    }
  }
}

}  // namespace fp8rl::reference
