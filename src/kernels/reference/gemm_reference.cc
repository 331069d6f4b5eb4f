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

namespace {
// The blockwise FP8 product with B's code and scale of (n, k) read through `b_code` / `b_scale`.
template <typename Code, typename Scale>
void fp8_loop(const QuantizedMatrix& A, int64_t N, Code b_code, Scale b_scale, float* C, int64_t ldc, bool accumulate) {
  FP8RL_CHECK(A.mode == ScalingMode::kRows1x128, "fp8 gemm: A must be quantized 1x128 along K, got {}", A.str());
  const int64_t M = A.rows, K = A.cols;
  for (int64_t m = 0; m < M; ++m) {
    for (int64_t n = 0; n < N; ++n) {
      float acc = 0.0f;
      for (int64_t k0 = 0; k0 < K; k0 += kQuantBlock) {
        float slice = 0.0f;
        for (int64_t k = k0; k < std::min(K, k0 + kQuantBlock); ++k)
          slice += e4m3_to_f32(A.codes[static_cast<size_t>(m * K + k)]) * e4m3_to_f32(b_code(n, k));
        acc += slice * (A.scale_at(m, k0) * b_scale(n, k0));
      }
      C[m * ldc + n] = accumulate ? C[m * ldc + n] + acc : acc;
    }
  }
}
}  // namespace

void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate) {
  FP8RL_CHECK(B.mode == ScalingMode::kRows1x128 || B.mode == ScalingMode::kBlocks128x128,
              "fp8 gemm: B must be quantized 1x128 or 128x128 along K, got {}", B.str());
  FP8RL_CHECK(A.cols == B.cols, "fp8 gemm: reduction sizes differ: A {} vs B {}", A.str(), B.str());
  const int64_t K = B.cols;
  fp8_loop(
      A, B.rows, [&](int64_t n, int64_t k) { return B.codes[static_cast<size_t>(n * K + k)]; },
      [&](int64_t n, int64_t k) { return B.scale_at(n, k); }, C, ldc, accumulate);
}

void gemm_nn_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate) {
  FP8RL_CHECK(B.mode == ScalingMode::kBlocks128x128, "fp8 gemm nn: B [K, N] must be quantized 128x128, got {}",
              B.str());
  FP8RL_CHECK(A.cols == B.rows, "fp8 gemm nn: reduction sizes differ: A {} vs B {}", A.str(), B.str());
  const int64_t N = B.cols;
  fp8_loop(
      A, N, [&](int64_t n, int64_t k) { return B.codes[static_cast<size_t>(k * N + n)]; },
      [&](int64_t n, int64_t k) { return B.scale_at(k, n); }, C, ldc, accumulate);
}

}  // namespace fp8rl::reference
