// Scalar twin of the one decode-GEMV product that has no GEMM twin: BF16 activations times FP8
// weights (W8A16). Never optimised. (BF16 x BF16 and FP8 x FP8 decode products are defined by
// gemm_nt_bf16 and gemm_nt_fp8 in gemm_reference.h.)
#pragma once

#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl::reference {

// y[M,N] = x[M,K] . W[N,K]^T with x BF16 (row stride ldx) and W FP8 (kBlocks128x128 or
// kRows1x128): for every output element and every 128-slice of K, the exact products of x and
// the decoded codes are summed in FP32 in index order, and running += slice * s_w.
void gemm_nt_bf16_fp8w(int64_t M, const bf16_t* x, int64_t ldx, const QuantizedMatrix& W, float* y, int64_t ldy);

}  // namespace fp8rl::reference
