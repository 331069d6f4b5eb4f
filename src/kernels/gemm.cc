// GEMM dispatch. Until the fast CPU kernels land, every entry point runs its scalar twin.
#include "kernels/gemm.h"

#include "kernels/reference/gemm_reference.h"

namespace fp8rl {

void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  reference::gemm_nt_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  reference::gemm_nn_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate) {
  reference::gemm_tn_f32(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  reference::gemm_nt_bf16(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  reference::gemm_nn_bf16(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate) {
  reference::gemm_tn_bf16(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}
void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate) {
  reference::gemm_nt_fp8(A, B, C, ldc, accumulate);
}

}  // namespace fp8rl
