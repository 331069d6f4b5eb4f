// GEMM dispatch: each public form becomes a GemmProblem (C = A B^T with operands described by
// their layout) and runs on the back-end of the resolved ISA (gemm_blocked.h).
#include "kernels/gemm/gemm.h"

#include <atomic>
#include <chrono>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "core/thread_pool.h"
#include "kernels/gemm/gemm_blocked.h"

namespace fp8rl {
namespace {

using gemm_detail::GemmOperand;
using gemm_detail::GemmProblem;

using BackendFn = const gemm_detail::GemmBackend& (*)(DType type);

// The back-ends per level, one table per operand family. FP32 has no AMX back-end (the tiles
// multiply BF16 pairs), so on AMX it falls back to AVX-512's; BF16 and FP8 run on the tiles.
constexpr IsaTable<BackendFn> kF32Backends{.portable = gemm_detail::gemm_backend_portable,
                                           .avx2 = gemm_detail::gemm_backend_avx2,
                                           .avx512 = gemm_detail::gemm_backend_avx512};
constexpr IsaTable<BackendFn> kLowPrecisionBackends{.portable = gemm_detail::gemm_backend_portable,
                                                    .avx2 = gemm_detail::gemm_backend_avx2,
                                                    .avx512 = gemm_detail::gemm_backend_avx512,
                                                    .amx = gemm_detail::gemm_backend_amx};

// The unpacked small-FP32 paths (gemm_direct_*.cc), tried before the blocked driver; each returns
// false, doing nothing, for a problem it does not take. Portable has none; AMX runs AVX-512's
// (the FP32 back-end it would otherwise use).
bool no_direct_path(const GemmProblem&) { return false; }
constexpr IsaTable<bool (*)(const GemmProblem&)> kDirectF32{.portable = no_direct_path,
                                                           .avx2 = gemm_detail::gemm_direct_f32_avx2,
                                                           .avx512 = gemm_detail::gemm_direct_f32_avx512};

const gemm_detail::GemmBackend& backend_for(DType type, const GemmOptions& options) {
  // Every back-end below is batch invariant (and gives the same rows as the decode GEMV of the
  // same ISA), so `batch_invariant` does not narrow the choice yet.
  return pick(type == DType::kF32 ? kF32Backends : kLowPrecisionBackends, options.isa)(type);
}

std::atomic<int64_t> g_calls{0}, g_flops{0}, g_nanoseconds{0};

// Adds one call to the running totals when it goes out of scope, unless it runs inside a pool
// task (gemm.h).
class Metered {
 public:
  Metered(int64_t M, int64_t N, int64_t K) : flops_(2 * M * N * K), counted_(!in_pool_task()), start_(Clock::now()) {}
  ~Metered() {
    if (!counted_) return;
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - start_).count();
    g_calls.fetch_add(1, std::memory_order_relaxed);
    g_flops.fetch_add(flops_, std::memory_order_relaxed);
    g_nanoseconds.fetch_add(ns, std::memory_order_relaxed);
  }
  Metered(const Metered&) = delete;
  Metered& operator=(const Metered&) = delete;

 private:
  using Clock = std::chrono::steady_clock;
  int64_t flops_;
  bool counted_;
  Clock::time_point start_;
};

void check_shape(int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb, int64_t ldc) {
  FP8RL_CHECK(M >= 0 && N >= 0 && K >= 0, "gemm: negative size M={} N={} K={}", M, N, K);
  FP8RL_CHECK(ldc >= N, "gemm: ldc {} < N {}", ldc, N);
  FP8RL_CHECK(lda >= 0 && ldb >= 0, "gemm: negative leading dimension lda={} ldb={}", lda, ldb);
}

// C[M,N] = A . B^T with A seen as [M,K] and B as [N,K]; `*_k_contiguous` says which layout each
// public form passes (nt: both; nn: A only; tn: neither).
template <typename T>
void run(DType type, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, bool a_k_contiguous,
         const T* B, int64_t ldb, bool b_k_contiguous, float* C, int64_t ldc, bool accumulate,
         const GemmOptions& options) {
  check_shape(M, N, K, lda, ldb, ldc);
  const Metered metered(M, N, K);
  GemmProblem p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a = GemmOperand{type, A, lda, a_k_contiguous, nullptr};
  p.b = GemmOperand{type, B, ldb, b_k_contiguous, nullptr};
  p.c = C;
  p.ldc = ldc;
  p.accumulate = accumulate;
  p.round_output_bf16 = options.round_output_bf16;
  // Small FP32 products run unpacked on this thread, with the same bits (gemm_direct_*.cc).
  if (pick(kDirectF32, options.isa)(p)) return;
  gemm_detail::gemm_blocked(p, backend_for(type, options), options.threads);
}

// C[M, N] (+)= A B^T with A [M, K] 1x128 and B as stored: [N, K] (b_k_contiguous) or [K, N].
void run_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, bool b_k_contiguous, float* C, int64_t ldc,
             bool accumulate, const GemmOptions& options) {
  const int64_t M = A.rows, N = b_k_contiguous ? B.rows : B.cols, K = A.cols;
  FP8RL_CHECK(A.mode == ScalingMode::kRows1x128, "fp8 gemm: A must be quantized 1x128 along K, got {}", A.str());
  FP8RL_CHECK(ldc >= N, "fp8 gemm: ldc {} < N {}", ldc, N);
  const Metered metered(M, N, K);
  GemmProblem p;
  p.M = M;
  p.N = N;
  p.K = K;
  p.a = GemmOperand{DType::kE4M3, A.codes.data(), A.cols, true, &A};
  p.b = GemmOperand{DType::kE4M3, B.codes.data(), B.cols, b_k_contiguous, &B};
  p.c = C;
  p.ldc = ldc;
  p.accumulate = accumulate;
  p.round_output_bf16 = options.round_output_bf16;
  gemm_detail::gemm_blocked(p, backend_for(DType::kE4M3, options), options.threads);
}

}  // namespace

// nt: A [M,K], B [N,K].  nn: A [M,K], B [K,N].  tn: A [K,M], B [K,N].
void gemm_nt_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kF32, M, N, K, A, lda, /*a_k_contiguous=*/true, B, ldb, /*b_k_contiguous=*/true, C, ldc, accumulate,
      options);
}
void gemm_nn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kF32, M, N, K, A, lda, /*a_k_contiguous=*/true, B, ldb, /*b_k_contiguous=*/false, C, ldc, accumulate,
      options);
}
void gemm_tn_f32(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb,
                 float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kF32, M, N, K, A, lda, /*a_k_contiguous=*/false, B, ldb, /*b_k_contiguous=*/false, C, ldc, accumulate,
      options);
}
void gemm_nt_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kBF16, M, N, K, A, lda, /*a_k_contiguous=*/true, B, ldb, /*b_k_contiguous=*/true, C, ldc, accumulate,
      options);
}
void gemm_nn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kBF16, M, N, K, A, lda, /*a_k_contiguous=*/true, B, ldb, /*b_k_contiguous=*/false, C, ldc, accumulate,
      options);
}
void gemm_tn_bf16(int64_t M, int64_t N, int64_t K, const bf16_t* A, int64_t lda, const bf16_t* B, int64_t ldb,
                  float* C, int64_t ldc, bool accumulate, const GemmOptions& options) {
  run(DType::kBF16, M, N, K, A, lda, /*a_k_contiguous=*/false, B, ldb, /*b_k_contiguous=*/false, C, ldc, accumulate,
      options);
}

void gemm_nt_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate,
                 const GemmOptions& options) {
  FP8RL_CHECK(B.mode == ScalingMode::kRows1x128 || B.mode == ScalingMode::kBlocks128x128,
              "fp8 gemm: B must be quantized 1x128 or 128x128 along K, got {}", B.str());
  FP8RL_CHECK(A.cols == B.cols, "fp8 gemm: reduction sizes differ: A {} vs B {}", A.str(), B.str());
  run_fp8(A, B, /*b_k_contiguous=*/true, C, ldc, accumulate, options);
}

void gemm_nn_fp8(const QuantizedMatrix& A, const QuantizedMatrix& B, float* C, int64_t ldc, bool accumulate,
                 const GemmOptions& options) {
  FP8RL_CHECK(B.mode == ScalingMode::kBlocks128x128, "fp8 gemm nn: B [K, N] must be quantized 128x128, got {}",
              B.str());
  FP8RL_CHECK(A.cols == B.rows, "fp8 gemm nn: reduction sizes differ: A {} vs B {}", A.str(), B.str());
  run_fp8(A, B, /*b_k_contiguous=*/false, C, ldc, accumulate, options);
}

GemmTotals gemm_totals() {
  return GemmTotals{g_calls.load(std::memory_order_relaxed),
                    static_cast<double>(g_flops.load(std::memory_order_relaxed)),
                    static_cast<double>(g_nanoseconds.load(std::memory_order_relaxed)) * 1e-9};
}

GemmTotals operator-(const GemmTotals& a, const GemmTotals& b) {
  return GemmTotals{a.calls - b.calls, a.flops - b.flops, a.seconds - b.seconds};
}

}  // namespace fp8rl
