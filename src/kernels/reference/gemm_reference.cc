#include "kernels/reference/gemm_reference.h"

#include "core/check.h"
#include "numerics/e4m3.h"

namespace fp8rl::reference {
namespace {

// C[m,n] (+)= sum_k a(m,k) * b(k,n), summed in FP32 in index order.
template <typename LoadA, typename LoadB>
void gemm_loop(int64_t M, int64_t N, int64_t K, LoadA a, LoadB b, float* C, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float sum = 0.0f;
      for (int64_t k = 0; k < K; ++k) sum += a(m, k) * b(k, n);
      C[m * ldc + n] = accumulate ? C[m * ldc + n] + sum : sum;
    }
  }
}

}  // namespace

void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return A[m * lda + k]; },
            [&](int64_t k, int64_t n) { return B[n * ldb + k]; }, C, ldc, accumulate);
}
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return A[m * lda + k]; },
            [&](int64_t k, int64_t n) { return B[k * ldb + n]; }, C, ldc, accumulate);
}
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return A[k * lda + m]; },
            [&](int64_t k, int64_t n) { return B[k * ldb + n]; }, C, ldc, accumulate);
}

void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return bf16_to_f32(A[m * lda + k]); },
            [&](int64_t k, int64_t n) { return bf16_to_f32(B[n * ldb + k]); }, C, ldc, accumulate);
}
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return bf16_to_f32(A[m * lda + k]); },
            [&](int64_t k, int64_t n) { return bf16_to_f32(B[k * ldb + n]); }, C, ldc, accumulate);
}
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  gemm_loop(M, N, K, [&](int64_t m, int64_t k) { return bf16_to_f32(A[k * lda + m]); },
            [&](int64_t k, int64_t n) { return bf16_to_f32(B[k * ldb + n]); }, C, ldc, accumulate);
}

void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate) {
  FP8RL_CHECK(A.mode == ScalingMode::kRows1x128, "fp8 gemm: A must be quantized 1x128 along K, got {}", A.str());
  FP8RL_CHECK(B.mode == ScalingMode::kRows1x128 || B.mode == ScalingMode::kBlocks128x128,
              "fp8 gemm: B must be quantized 1x128 or 128x128 along K, got {}", B.str());
  FP8RL_CHECK(A.cols == B.cols, "fp8 gemm: reduction sizes differ: A {} vs B {}", A.str(), B.str());
  const int64_t M = A.rows, N = B.rows, K = A.cols;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += kQuantBlock) {
        float slice = 0.0f;
        for (int64_t k = k0; k < std::min(K, k0 + kQuantBlock); ++k)
          slice += e4m3_to_f32(A.codes[static_cast<size_t>(m * K + k)]) * e4m3_to_f32(B.codes[static_cast<size_t>(n * K + k)]);
        acc += slice * (A.scale_at(m, k0) * B.scale_at(n, k0));
      }
      C[m * ldc + n] = accumulate ? C[m * ldc + n] + acc : acc;
    }
  }
}

}  // namespace fp8rl::reference
