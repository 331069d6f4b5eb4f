// GEMM entry points used by the model (the trainer's three GEMMs of every linear layer).
//
// Signatures and semantics are those of the scalar twins in reference/gemm_reference.h:
// row-major operands with leading dimensions in elements, FP32 output C (added to with
// `accumulate`). For a linear layer Y = X W^T (X [M,K], W [N,K]):
//   fprop  Y  = X W^T   -> gemm_nt_*(M, N, K, X, W, Y)
//   dgrad  dX = dY W    -> gemm_nn_*(M, K, N, dY, W, dX)
//   wgrad  dW = dY^T X  -> gemm_tn_*(N, K, M, dY, X, dW)
// and in FP8 they are gemm_nt_fp8 on the right quantized copies and, for dgrad, gemm_nn_fp8 on the
// weight as stored (see the reference).
//
// Every entry point takes GemmOptions (defaults: best ISA, every thread of the kernel pool).
// Results never depend on the thread count, nor on M or on the other rows (batch invariance):
// each output element is computed by the same instruction sequence whatever the tiling. The
// AVX-512 and portable paths differ from each other (and from the scalar twins) only by
// summation order and by vdpbf16ps flushing BF16 denormal inputs; docs/kernels.md has the
// layouts and the dispatch.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl {

struct GemmOptions {
  Isa isa = Isa::kAuto;
  int threads = 0;  // 0: hardware_threads() (core/thread_pool.h); results are the same for any count
  // Restricts the choice of path to those whose rows are bit-identical to the decode GEMV's
  // (kernels/gemv/gemv.h) for the same inputs and ISA. Every current GEMM path already is; the option
  // exists so that a future non-invariant one (a split-K, say) can never be picked silently.
  bool batch_invariant = false;
  // C is rounded to BF16 values (bf16_round_f32's bits) tile by tile, as each register tile of C
  // is finished and still in cache, instead of in a pass over C afterwards. With `accumulate`,
  // the sum C + A B^T is rounded.
  bool round_output_bf16 = false;
};

void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});

void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});
// C[M, N] = A[M, K] B[K, N] with B quantized 128x128 as stored (the dgrad dX = dY W on the weight
// itself): the bits of gemm_nt_fp8 on B's column-wise copy, without that copy.
void gemm_nn_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate = false,
                 const GemmOptions& options = {});

// Running totals over the calls above made outside thread-pool tasks, since the process
// started: the difference of two readings is what those products did in between (bench model
// reports the training step's GEMM rate from it: the linears and the LM head). Calls from inside
// pool tasks (the attention backward's per-head products, several at a time) are left out, since
// their times overlap. Two clock readings and three relaxed atomic additions per counted call.
struct GemmTotals {
  int64_t calls = 0;
  double flops = 0;    // 2 M N K per call
  double seconds = 0;  // wall time inside the calls
};
GemmTotals gemm_totals();
GemmTotals operator-(const GemmTotals& a, const GemmTotals& b);

}  // namespace fp8rl
