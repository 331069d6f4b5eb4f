// Small FP32 GEMMs without packing (AVX-512), on the calling thread.
//
// The attention backward multiplies small blocks once per (sequence, head); with GRPO's short
// sequences (tens of tokens) they are tiny, and packing panels and walking the blocked driver's
// loops cost more than the products. Here B is read in place, with N contiguous (B [K, N], the
// nn and tn forms) or transposed once into a small buffer (the nt form), and A's elements are
// broadcast from wherever its layout puts them.
//
// Same bits as the blocked AVX-512 path (kernel_f32 in gemm_avx512.cc): each element of the
// product is one FMA chain over k = 0, 1, ... starting from zero; with `accumulate` it is then
// added to C (C + product); with round_output_bf16 the result is rounded to BF16 values.
#include <algorithm>
#include <vector>

#include "kernels/gemm/gemm_blocked.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see that header)

namespace fp8rl::gemm_detail {
namespace {

constexpr int kRows = 6;     // rows of C per register tile
constexpr int kVectors = 4;  // 16-column vectors per register tile (64 columns)
// B is re-read once per kRows rows of C, so it must stay in L1; beyond that (the backward's 64 x
// 256 x 64 blocks at 256 tokens, B 64 KiB with rows 2 KiB apart) the packed path is faster. The
// product must also be small enough that one thread is the right number.
constexpr int64_t kMaxBElements = 8 * 1024;  // 32 KiB of FP32
constexpr int64_t kMaxMacs = 1024 * 1024;

// A(m, k) = a[m * sm + k * sk].
struct StridedA {
  const float* a;
  int64_t sm, sk;
};

inline __mmask16 column_mask(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// C[0:R, 0:16 V) (columns past `cols` untouched) from A rows [0, R) and B [K, ldb] (N contiguous).
template <int R, int V>
void tile(int64_t K, StridedA A, const float* b, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool accumulate,
          bool round) {
  __mmask16 mask[V];
  for (int v = 0; v < V; ++v) mask[v] = column_mask(cols - 16 * v);
  __m512 acc[R][V];
  for (int m = 0; m < R; ++m)
    for (int v = 0; v < V; ++v) acc[m][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 bv[V];
    for (int v = 0; v < V; ++v) bv[v] = _mm512_maskz_loadu_ps(mask[v], b + k * ldb + 16 * v);
    for (int m = 0; m < R; ++m) {
      const __m512 av = _mm512_set1_ps(A.a[m * A.sm + k * A.sk]);
      for (int v = 0; v < V; ++v) acc[m][v] = _mm512_fmadd_ps(av, bv[v], acc[m][v]);
    }
  }
  for (int m = 0; m < R; ++m)
    for (int v = 0; v < V; ++v) {
      float* out = c + m * ldc + 16 * v;
      __m512 x = acc[m][v];
      if (accumulate) x = _mm512_add_ps(_mm512_maskz_loadu_ps(mask[v], out), x);
      if (round) x = avx512::bf16_round16(x);
      _mm512_mask_storeu_ps(out, mask[v], x);
    }
}

template <int R>
void tile_rows(int64_t K, StridedA A, const float* b, int64_t ldb, int64_t cols, float* c, int64_t ldc, bool accumulate,
               bool round) {
  switch ((cols + 15) / 16) {
    case 1: return tile<R, 1>(K, A, b, ldb, cols, c, ldc, accumulate, round);
    case 2: return tile<R, 2>(K, A, b, ldb, cols, c, ldc, accumulate, round);
    case 3: return tile<R, 3>(K, A, b, ldb, cols, c, ldc, accumulate, round);
    default: return tile<R, 4>(K, A, b, ldb, cols, c, ldc, accumulate, round);
  }
}

using TileFn = void (*)(int64_t, StridedA, const float*, int64_t, int64_t, float*, int64_t, bool, bool);
constexpr TileFn kTileForRows[kRows + 1] = {nullptr,      tile_rows<1>, tile_rows<2>, tile_rows<3>,
                                            tile_rows<4>, tile_rows<5>, tile_rows<6>};

}  // namespace

bool gemm_direct_f32_avx512(const GemmProblem& p) {
  if (p.a.type != DType::kF32 || p.b.type != DType::kF32) return false;
  if (p.M <= 0 || p.N <= 0 || p.K <= 0) return false;  // the driver's edge cases (K = 0 leaves C as is)
  if (p.K * p.N > kMaxBElements || p.M * p.N * p.K > kMaxMacs) return false;
  // B as [K, N] with N contiguous: in place (B^T stored K-major), or transposed here.
  const float* b = static_cast<const float*>(p.b.data);
  int64_t ldb = p.b.ld;
  if (p.b.k_contiguous) {
    thread_local std::vector<float> bt;
    bt.resize(static_cast<size_t>(p.K * p.N));
    for (int64_t n = 0; n < p.N; ++n)
      for (int64_t k = 0; k < p.K; ++k) bt[static_cast<size_t>(k * p.N + n)] = b[n * ldb + k];
    b = bt.data();
    ldb = p.N;
  }
  const auto* a = static_cast<const float*>(p.a.data);
  const int64_t a_sm = p.a.k_contiguous ? p.a.ld : 1, a_sk = p.a.k_contiguous ? 1 : p.a.ld;
  for (int64_t n0 = 0; n0 < p.N; n0 += 16 * kVectors) {
    const int64_t cols = std::min<int64_t>(16 * kVectors, p.N - n0);
    for (int64_t m0 = 0; m0 < p.M; m0 += kRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kRows, p.M - m0));
      kTileForRows[rows](p.K, StridedA{a + m0 * a_sm, a_sm, a_sk}, b + n0, ldb, cols, p.c + m0 * p.ldc + n0, p.ldc,
                         p.accumulate, p.round_output_bf16);
    }
  }
  return true;
}

}  // namespace fp8rl::gemm_detail

FP8RL_AVX512_END
