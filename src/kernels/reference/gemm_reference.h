// Scalar twins of the GEMM kernels: obviously-right triple loops, never optimised. Every fast
// path in kernels/ is tested against these.
//
// All matrices are row-major with leading dimensions (row strides) in elements. C is FP32 and,
// with `accumulate`, the product is added to it. Sums run in FP32 in index order.
#pragma once

#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl::reference {

// C[M,N] = A[M,K] . B[N,K]^T      (fprop: Y = X W^T)
void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate);
// C[M,N] = A[M,K] . B[K,N]        (dgrad: dX = dY W)
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate);
// C[M,N] = A[K,M]^T . B[K,N]      (wgrad: dW = dY^T X)
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate);

// The same products with BF16 operands; products are exact in FP32, sums in FP32.
void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate);
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate);
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate);

// Blockwise FP8 (docs/recipe.md section 4): C[M,N] = A[M,K] . B[N,K]^T where A is kRows1x128 and
// B is kRows1x128 or kBlocks128x128, both quantized along K. For every output element and every
// 128-wide slice of K: the exact products of the decoded codes are summed in FP32, the slice sum
// is multiplied by (s_a * s_b) and added to an FP32 accumulator.
//   fprop  Y  = X W^T  : A = X  [M,K] 1x128,           B = W [N,K] 128x128
//   dgrad  dX = dY W   : A = dY [M,N] 1x128,           B = W's column-wise copy [K,N] 128x128
//   wgrad  dW = dY^T X : A = dY's column-wise [N,M],   B = X's column-wise copy [K,M] (both 1x128)
void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate);
// The same with B [K,N] quantized 128x128 as stored: C[M,N] = A[M,K] . B[K,N] (dgrad on W itself,
// A = dY, B = W [N_out, K_in]; a 128x128 block's 128-slices along K are the same both ways).
void gemm_nn_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate);

}  // namespace fp8rl::reference
