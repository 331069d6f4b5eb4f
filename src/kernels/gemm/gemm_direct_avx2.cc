// Small FP32 GEMMs without packing (AVX2 + FMA), on the calling thread.
//
// The AVX2 twin of gemm_direct_avx512.cc: B is read in place with N contiguous (B [K, N], the nn
// and tn forms) or transposed once (8 x 8 blocks in registers) into a small buffer [K][N] (the nt
// form), and A's elements are broadcast from wherever its layout puts them. Register tile 6 x 16:
// 12 accumulators (6 rows x 2 vectors of 8 columns), two B vectors and one broadcast, as the
// packed kernel.
//
// Limits: those of the AVX-512 path. Measured on one Zen 5 core (thread CPU time, FP32 GFLOP/s,
// direct vs blocked): attention-backward shapes T x T x 64 (nt) and T x 64 x T (nn, tn) gain
// 5-60 % at T = 16..64; at the limit (128 x 128 x 64 nt, B = 8192 elements) the two are within
// 3 %. Beyond it the nn / tn forms would still gain (256 x 64 x 256: 74 vs 83 us), but they are
// large enough to be worth the pool's second thread, which only the blocked path uses.
//
// Same bits as the blocked AVX2 path (kernel_f32 in gemm_avx2.cc), hence as the AVX-512 one:
// each element of the product is one FMA chain over k = 0, 1, ... starting from zero; with
// `accumulate` it is then added to C (C + product); with round_output_bf16 the result is rounded
// to BF16 values (avx2::bf16_round8, bf16_round_f32's bits).
#include <algorithm>
#include <vector>

#include "kernels/gemm/gemm_blocked.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "kernels/simd/avx2_transpose_inl.h"
#include "numerics/avx2_codec_inl.h"  // inside the region by design (see that header)

namespace fp8rl::gemm_detail {
namespace {

constexpr int kRows = 6;     // rows of C per register tile
constexpr int kVectors = 2;  // 8-column vectors per register tile (16 columns)
// B is re-read once per kRows rows of C, so it must stay in L1 (32 KiB on the target CPUs); the
// product must also be small enough that one thread is the right number.
constexpr int64_t kMaxBElements = 8 * 1024;  // 32 KiB of FP32
constexpr int64_t kMaxMacs = 1024 * 1024;

// A(m, k) = a[m * sm + k * sk].
struct StridedA {
  const float* a;
  int64_t sm, sk;
};

// C[0:R, 0:8 V) (columns past `cols` untouched when Masked) from A rows [0, R) and B [K, ldb]
// (N contiguous). Unmasked tiles have cols == 8 V.
template <int R, int V, bool Masked>
void tile(int64_t K, StridedA A, const float* b, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool accumulate,
          bool round) {
  __m256i mask[V];
#pragma GCC unroll 8
  for (int v = 0; v < V; ++v) mask[v] = avx2::first_lanes_mask(std::max<int64_t>(0, cols - 8 * v));
  __m256 acc[R][V];
#pragma GCC unroll 8
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) acc[m][v] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 bv[V];
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v)
      bv[v] = Masked ? _mm256_maskload_ps(b + k * ldb + 8 * v, mask[v]) : _mm256_loadu_ps(b + k * ldb + 8 * v);
#pragma GCC unroll 8
    for (int m = 0; m < R; ++m) {
      const __m256 av = _mm256_broadcast_ss(A.a + m * A.sm + k * A.sk);
#pragma GCC unroll 8
      for (int v = 0; v < V; ++v) acc[m][v] = _mm256_fmadd_ps(av, bv[v], acc[m][v]);
    }
  }
#pragma GCC unroll 8
  for (int m = 0; m < R; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < V; ++v) {
      float* out = c + m * ldc + 8 * v;
      __m256 x = acc[m][v];
      if (accumulate) x = _mm256_add_ps(Masked ? _mm256_maskload_ps(out, mask[v]) : _mm256_loadu_ps(out), x);
      if (round) x = avx2::bf16_round8(x);
      if (Masked) {
        _mm256_maskstore_ps(out, mask[v], x);
      } else {
        _mm256_storeu_ps(out, x);
      }
    }
}

template <int R>
void tile_rows(int64_t K, StridedA A, const float* b, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool accumulate,
               bool round) {
  if (cols == 8 * kVectors) return tile<R, kVectors, false>(K, A, b, ldb, cols, c, ldc, accumulate, round);
  if (cols == 8) return tile<R, 1, false>(K, A, b, ldb, cols, c, ldc, accumulate, round);
  if (cols < 8) return tile<R, 1, true>(K, A, b, ldb, cols, c, ldc, accumulate, round);
  return tile<R, 2, true>(K, A, b, ldb, cols, c, ldc, accumulate, round);
}

// bt [K][N] = b [N][K] (row stride ldb): 8 x 8 blocks transposed in registers, scalar edges.
void transpose_b(const float* b, int64_t ldb, int64_t N, int64_t K, float* bt) {
  int64_t n0 = 0;
  for (; n0 + 8 <= N; n0 += 8) {
    int64_t k0 = 0;
    for (; k0 + 8 <= K; k0 += 8) {
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) r[i] = _mm256_loadu_ps(b + (n0 + i) * ldb + k0);
      avx2::transpose8(r);
      float* out = bt + k0 * N + n0;
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) _mm256_storeu_ps(out + i * N, r[i]);
    }
    for (int64_t n = n0; n < n0 + 8; ++n)
      for (int64_t k = k0; k < K; ++k) bt[k * N + n] = b[n * ldb + k];
  }
  for (int64_t n = n0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) bt[k * N + n] = b[n * ldb + k];
}

using TileFn = void (*)(int64_t, StridedA, const float*, int64_t, int64_t, float*, int64_t, bool, bool);
constexpr TileFn kTileForRows[kRows + 1] = {nullptr,      tile_rows<1>, tile_rows<2>, tile_rows<3>,
                                            tile_rows<4>, tile_rows<5>, tile_rows<6>};

}  // namespace

bool gemm_direct_f32_avx2(const GemmProblem& p) {
  if (p.a.type != DType::kF32 || p.b.type != DType::kF32) return false;
  if (p.M <= 0 || p.N <= 0 || p.K <= 0) return false;  // the driver's edge cases (K = 0 leaves C as is)
  if (p.K * p.N > kMaxBElements || p.M * p.N * p.K > kMaxMacs) return false;
  // B as [K, N] with N contiguous: in place (B^T stored K-major), or transposed here.
  const float* b = static_cast<const float*>(p.b.data);
  int64_t ldb = p.b.ld;
  if (p.b.k_contiguous) {
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(p.K * p.N));
    transpose_b(b, ldb, p.N, p.K, bt.data());
    b = bt.data();
    ldb = p.N;
  }
  const auto* a = static_cast<const float*>(p.a.data);
  const int64_t a_sm = p.a.k_contiguous ? p.a.ld : 1, a_sk = p.a.k_contiguous ? 1 : p.a.ld;
  for (int64_t n0 = 0; n0 < p.N; n0 += 8 * kVectors) {
    const int64_t cols = std::min<int64_t>(8 * kVectors, p.N - n0);
    for (int64_t m0 = 0; m0 < p.M; m0 += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, p.M - m0));
      kTileForRows[rows](p.K, StridedA{a + m0 * a_sm, a_sm, a_sk}, b + n0, ldb, cols, p.c + m0 * p.ldc + n0, p.ldc,
                         p.accumulate, p.round_output_bf16);
    }
  }
  return true;
}

}  // namespace fp8rl::gemm_detail

FP8RL_AVX2_END
