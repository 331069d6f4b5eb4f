// GEMM entry points used by the model (the trainer's three GEMMs of every linear layer).
//
// Signatures and semantics are those of the scalar twins in reference/gemm_reference.h:
// row-major operands with leading dimensions in elements, FP32 output C (added to with
// `accumulate`). For a linear layer Y = X W^T (X [M,K], W [N,K]):
//   fprop  Y  = X W^T   -> gemm_nt_*(M, N, K, X, W, Y)
//   dgrad  dX = dY W    -> gemm_nn_*(M, K, N, dY, W, dX)
//   wgrad  dW = dY^T X  -> gemm_tn_*(N, K, M, dY, X, dW)
// and in FP8 every one of them is gemm_nt_fp8 on the right quantized copies (see the reference).
#pragma once

#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl {

void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false);
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false);
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false);

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false);
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false);
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false);

void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate = false);

}  // namespace fp8rl
