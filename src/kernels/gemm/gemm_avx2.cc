// AVX2 + FMA back-end of the blocked GEMM (256-bit vectors, 16 ymm registers, no AVX-512).
//
// Every operand type is widened exactly to FP32 while packing (BF16: a 16-bit shift; E4M3:
// avx2::e4m3_decode8), so one FP32 micro-kernel serves FP32 and BF16, and the FP8 kernel is the
// same loop restarted per 128-slice of K.
//
// Register tile 6 x 16 (BLIS "haswell" shape): 12 FP32 accumulators (6 rows x 2 vectors of 8
// columns), two B vectors and one A broadcast live = 15 of the 16 ymm registers. Per k: 2 B
// loads, 6 broadcasts (load-port uops), 12 vfmadd231ps, which keeps both FMA pipes of Zen 3 /
// Haswell..Alder Lake busy (12 independent chains cover the 4-5 cycle FMA latency).
//
// Packed layouts (k_group 1, element_bytes 4):
//   A panel [kc][6] f32:  for every k, the 6 rows' values (24 bytes), rows past M zero.
//   B panel [kc][16] f32: for every k, the 16 columns' values (64 bytes = two ymm), columns past
//                         N zero.
//   FP8 scales: A [ceil(kc/128)][6] f32, B [ceil(kc/128)][16] f32 (1 past the matrix).
// K-contiguous sources are packed 8 x 8 at a time: eight rows of eight k are loaded (and
// decoded), transposed in registers and stored as eight k of eight rows. Row-contiguous sources
// (element (r, k) at data[k * ld + r], the nn / tn forms) are a straight copy per k.
//
// Numerics (docs/kernels.md, "Accuracy against the scalar twins"): each output element is one
// FMA chain over k in index order, from zero (or from C for a continued K block). BF16 x BF16 and
// E4M3 x E4M3 products are exact in FP32, so fma(a, b, acc) is the portable back-end's
// acc + a * b: the BF16 and FP8 products are the portable path's bits. The FP32 product is the
// AVX-512 back-end's (also one FMA chain per element). FP8 promotion is
// running = running + slice * (s_a * s_b), multiply then add (no FMA), as in the portable kernel.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "core/check.h"
#include "kernels/gemm/gemm_blocked.h"
#include "numerics/bf16.h"
#include "numerics/simd_target.h"

FP8RL_AVX2_BEGIN
#include "kernels/simd/avx2_transpose_inl.h"
#include "numerics/avx2_codec_inl.h"  // inside the region by design (see that header)

namespace fp8rl::gemm_detail {
namespace {

constexpr int kMr = 6;
constexpr int kNr = 16;
constexpr int kNv = kNr / 8;  // accumulator vectors per row

// ---- loading 8 elements of any source type as FP32 (exact) -----------------------------------

inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
inline __m256 load8(const bf16_t* p) {
  return avx2::bf16_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
inline __m256 load8(const uint8_t* p) {
  return avx2::e4m3_decode8(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// The first 6 elements at p in lanes 0-5 (lanes 6, 7 zero), reading nothing past p[5].
inline __m256 load6(const float* p) {
  // _mm_loadl_epi64 reads through an unaligned type (_mm_load_sd would dereference a double*).
  const __m128 hi = _mm_castsi128_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + 4)));
  return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm_loadu_ps(p)), hi, 1);
}
inline __m256 load6(const bf16_t* p) {
  int32_t last;
  std::memcpy(&last, p + 4, 4);
  const __m128i h = _mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)), _mm_cvtsi32_si128(last));
  return avx2::bf16_decode8(h);
}
inline __m256 load6(const uint8_t* p) {
  uint8_t tmp[8] = {};
  std::memcpy(tmp, p, 6);
  return load8(tmp);
}

// The first n (< 8) elements at p, the rest zero (codes and patterns 0 decode to +0).
template <typename T>
inline __m256 load_partial(const T* p, int64_t n) {
  T tmp[8] = {};
  std::memcpy(tmp, p, static_cast<size_t>(n) * sizeof(T));
  return load8(tmp);
}

// Stores lanes 0..lanes-1 (8 or 6) of v at p.
inline void store_lanes(float* p, __m256 v, int lanes) {
  if (lanes == 8) {
    _mm256_storeu_ps(p, v);
    return;
  }
  _mm_storeu_ps(p, _mm256_castps256_ps128(v));
  _mm_storel_epi64(reinterpret_cast<__m128i*>(p + 4), _mm_castps_si128(_mm256_extractf128_ps(v, 1)));
}

// ---- packing -------------------------------------------------------------------------------

// K-contiguous source (element (r, k) at src[r * ld + k]): rows [r0, r0 + rows) x k [k0, k0 + kc)
// -> out [kc][tile] f32, tile 6 or 16, zero past `rows`. Groups of 8 rows (the tile-6 panel is
// one group whose lanes 6, 7 are dropped), 8 k at a time through transpose8.
template <typename T>
void pack_rows(const T* src, int64_t ld, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, float* out) {
  for (int g = 0; g < tile; g += 8) {
    const int lanes = std::min(8, tile - g);
    const int valid = std::clamp(rows - g, 0, lanes);
    const T* base = src + (r0 + g) * ld + k0;
    for (int64_t k = 0; k < kc; k += 8) {
      const int64_t n = std::min<int64_t>(8, kc - k);
      __m256 v[8];
      for (int i = 0; i < 8; ++i) {
        if (i >= valid) {
          v[i] = _mm256_setzero_ps();
        } else {
          v[i] = n == 8 ? load8(base + i * ld + k) : load_partial(base + i * ld + k, n);
        }
        // The next panel's rows, a line at a time: the driver packs panels of consecutive rows,
        // more streams than the hardware prefetcher follows (as in the AVX-512 packer).
        if (k * static_cast<int64_t>(sizeof(T)) % 64 == 0)
          _mm_prefetch(reinterpret_cast<const char*>(base + (i + tile) * ld + k), _MM_HINT_T0);
      }
      avx2::transpose8(v);
      for (int j = 0; j < n; ++j) store_lanes(out + (k + j) * tile + g, v[j], lanes);
    }
  }
}

// Row-contiguous source (element (r, k) at src[k * ld + r]): per k, the tile's consecutive
// elements copied (widened) to out [kc][tile]; edge panels (rows < tile) through a zeroed copy.
template <typename T>
void pack_cols(const T* src, int64_t ld, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, float* out) {
  for (int64_t k = 0; k < kc; ++k) {
    const T* row = src + (k0 + k) * ld + r0;
    float* dst = out + k * tile;
    if (rows < tile) {
      T tmp[kNr] = {};
      std::memcpy(tmp, row, static_cast<size_t>(rows) * sizeof(T));
      for (int g = 0; g < tile; g += 8) store_lanes(dst + g, load8(tmp + g), std::min(8, tile - g));
    } else if (tile == kMr) {
      store_lanes(dst, load6(row), kMr);
    } else {
      _mm256_storeu_ps(dst, load8(row));
      _mm256_storeu_ps(dst + 8, load8(row + 8));
    }
  }
}

template <typename T>
void pack_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel, float*) {
  const T* src = static_cast<const T*>(op.data);
  if (op.k_contiguous) {
    pack_rows(src, op.ld, r0, rows, tile, k0, kc, static_cast<float*>(panel));
  } else {
    pack_cols(src, op.ld, r0, rows, tile, k0, kc, static_cast<float*>(panel));
  }
}

// FP8 codes, decoded exactly while packing; scales [ceil(kc/128)][tile].
void pack_fp8_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                    float* scales) {
  pack_panel<uint8_t>(op, r0, rows, tile, k0, kc, panel, nullptr);
  pack_fp8_scales(op, r0, rows, tile, k0, kc, scales);
}

// ---- micro-kernels ---------------------------------------------------------------------------
// Every loop over the accumulator arrays is fully unrolled: with one loop left rolled, GCC keeps
// the array in memory and stores all 12 accumulators on every k.

// acc[m][v] = fma(a[k][m], b[k][8v..8v+7], acc[m][v]) for k in [0, kc), in order.
inline void tile_sum(const float* a, const float* b, int64_t kc, __m256 (&acc)[kMr][kNv]) {
#pragma GCC unroll 4
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * kNr), b1 = _mm256_loadu_ps(b + k * kNr + 8);
#pragma GCC unroll 6
    for (int m = 0; m < kMr; ++m) {
      const __m256 av = _mm256_broadcast_ss(a + k * kMr + m);
      acc[m][0] = _mm256_fmadd_ps(av, b0, acc[m][0]);
      acc[m][1] = _mm256_fmadd_ps(av, b1, acc[m][1]);
    }
  }
}

// Prefetches rows [r0, r0 + kMr) of the 16-column strip at c (two lines a row when unaligned).
inline void prefetch_c_rows(const float* c, int64_t ldc, int r0) {
  for (int m = r0; m < r0 + kMr; ++m) {
    _mm_prefetch(reinterpret_cast<const char*>(c + m * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + m * ldc + kNr - 1), _MM_HINT_T0);
  }
}

void kernel_f32(int64_t kc, const void* a_panel, const void* b_panel, const float*, const float*, float* c, int64_t ldc,
                bool load_c) {
  // A continued K block starts its chains from C, whose rows the previous block evicted from L1
  // and L2: fetch the next tile down (the driver's next call) while this one computes.
  if (load_c) prefetch_c_rows(c, ldc, kMr);
  __m256 acc[kMr][kNv];
#pragma GCC unroll 8
  for (int m = 0; m < kMr; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) acc[m][v] = load_c ? _mm256_loadu_ps(c + m * ldc + 8 * v) : _mm256_setzero_ps();
  tile_sum(static_cast<const float*>(a_panel), static_cast<const float*>(b_panel), kc, acc);
#pragma GCC unroll 8
  for (int m = 0; m < kMr; ++m)
#pragma GCC unroll 8
    for (int v = 0; v < kNv; ++v) _mm256_storeu_ps(c + m * ldc + 8 * v, acc[m][v]);
}

// Blockwise FP8: each 128-slice of K summed from zero, then running = running + slice * (sa * sb).
// Between the slices of one call the running tile lives in a contiguous L1 block (`running`): C's
// rows may be 4 KiB apart and compete for the same L1 sets. The first slice reads C (or zero),
// the last one writes C; same operations, same bits as promoting in C.
void kernel_fp8(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                int64_t ldc, bool load_c) {
  const auto* a = static_cast<const float*>(a_panel);
  const auto* b = static_cast<const float*>(b_panel);
  alignas(32) float running[kMr * kNr];
  const int64_t slices = (kc + kQuantBlock - 1) / kQuantBlock;
  // C is first read after the first slice's products: fetch its rows now (they are usually in L3,
  // the previous K block having swept all of C), so that the read does not stall the promotion.
  if (load_c) prefetch_c_rows(c, ldc, 0);
  for (int64_t s = 0; s < slices; ++s) {
    __m256 acc[kMr][kNv];
#pragma GCC unroll 8
    for (int m = 0; m < kMr; ++m)
#pragma GCC unroll 8
      for (int v = 0; v < kNv; ++v) acc[m][v] = _mm256_setzero_ps();
    const int64_t k0 = s * kQuantBlock;
    tile_sum(a + k0 * kMr, b + k0 * kNr, std::min(kQuantBlock, kc - k0), acc);
    const bool first = s == 0, last = s + 1 == slices;
#pragma GCC unroll 8
    for (int m = 0; m < kMr; ++m) {
      const __m256 scale_a = _mm256_broadcast_ss(sa + s * kMr + m);
#pragma GCC unroll 8
      for (int v = 0; v < kNv; ++v) {
        const __m256 scale = _mm256_mul_ps(scale_a, _mm256_loadu_ps(sb + s * kNr + 8 * v));
        float* in = first ? c + m * ldc + 8 * v : running + m * kNr + 8 * v;
        float* out = last ? c + m * ldc + 8 * v : running + m * kNr + 8 * v;
        const __m256 before = first && !load_c ? _mm256_setzero_ps() : _mm256_loadu_ps(in);
        _mm256_storeu_ps(out, _mm256_add_ps(before, _mm256_mul_ps(acc[m][v], scale)));
      }
    }
  }
}

// kernel_adding for either kernel above: the product of one K block in a tile on the stack, then
// added to C a vector at a time (the driver's scalar loop did the same additions).
template <MicroKernelFn kKernel>
void kernel_adding(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                   int64_t ldc, bool) {
  alignas(32) float product[kMr * kNr];
  kKernel(kc, a_panel, b_panel, sa, sb, product, kNr, /*load_c=*/false);
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) {
      float* cv = c + m * ldc + 8 * v;
      _mm256_storeu_ps(cv, _mm256_add_ps(_mm256_loadu_ps(cv), _mm256_load_ps(product + m * kNr + 8 * v)));
    }
}

GemmBackend make_backend(DType type) {
  GemmBackend be;
  be.mr = kMr;
  be.nr = kNr;
  be.k_group = 1;
  be.element_bytes = 4;
  // kc 256: the B micro-panel (256 x 16 x 4 = 16 KiB) stays in a 32 KiB L1 next to the A
  // micro-panel (6 KiB); mc 168 (28 panels): the A block is 168 KiB of a 512 KiB+ L2; nc 3072:
  // the B block (3 MiB) in L3. kc is a multiple of 128, so FP8 slices never straddle K blocks.
  be.kc_block = 256;
  be.mc_block = 168;
  be.nc_block = 3072;
  switch (type) {
    case DType::kF32:
      be.name = "avx2-f32";
      be.pack_a = be.pack_b = pack_panel<float>;
      be.kernel = kernel_f32;
      be.kernel_adding = kernel_adding<kernel_f32>;
      break;
    case DType::kBF16:
      be.name = "avx2-bf16";
      be.pack_a = be.pack_b = pack_panel<bf16_t>;
      be.kernel = kernel_f32;
      be.kernel_adding = kernel_adding<kernel_f32>;
      break;
    case DType::kE4M3:
      be.name = "avx2-fp8";
      be.blockwise = true;
      be.pack_a = be.pack_b = pack_fp8_panel;
      be.kernel = kernel_fp8;
      be.kernel_adding = kernel_adding<kernel_fp8>;
      break;
    case DType::kI32:
    case DType::kU8: FP8RL_CHECK(false, "no AVX2 GEMM for {} operands", dtype_name(type));
  }
  return be;
}

}  // namespace

const GemmBackend& gemm_backend_avx2(DType type) {
  static const GemmBackend f32 = make_backend(DType::kF32);
  static const GemmBackend bf16 = make_backend(DType::kBF16);
  static const GemmBackend fp8 = make_backend(DType::kE4M3);
  switch (type) {
    case DType::kF32: return f32;
    case DType::kBF16: return bf16;
    case DType::kE4M3: return fp8;
    case DType::kI32:
    case DType::kU8: break;  // never GEMM operands (gemm.cc builds F32, BF16 and E4M3 ones)
  }
  return f32;
}

}  // namespace fp8rl::gemm_detail

FP8RL_AVX2_END
