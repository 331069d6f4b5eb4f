// The blocked GEMM driver shared by every fast path, and the interface its ISA back-ends fill.
//
// C[M,N] = A[M,K] . B[N,K]^T, where each operand is described by a GemmOperand (any of the
// public API's layouts). The driver cuts the problem into cache blocks (GotoBLAS / BLIS loop
// order), asks the back-end to pack micro-panels of A and B into its register-tile layout, and
// calls the back-end's micro-kernel on every MR x NR tile of C:
//
//   for pc in K by kc_block                      (a K block; kc_block is a multiple of 128)
//     for jc in N by nc_block:  pack B block     [nc/NR panels][kc/kg][NR][kg]
//       for ic in M by mc_block: pack A block    [mc/MR panels][kc/kg][MR][kg]
//         for jr in nc by NR, ir in mc by MR:    micro-kernel on C[ic+ir : +MR, jc+jr : +NR]
//
// Where a task's C[M, nc] block fits in cache (kCBlockBytes: a small M, such as the LM head's
// chunks of rows) the pc and jc loops swap, so that C stays in cache across the K blocks.
//
// kg (k_group) is 2 for BF16 pairs (the vdpbf16ps operand layout), 1 for FP32. Panels are
// zero-padded past the matrix edges, so the micro-kernel always computes full tiles; edge tiles
// go through a small buffer. The accumulators continue across K blocks by reloading C (FP32
// round-trips through memory exactly), so the summation order of each element is fixed by K
// alone: that is what makes every row independent of M, N, the tiling and the thread count.
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl::gemm_detail {

// One GEMM operand seen as a [rows, K] matrix (rows = M for A, N for B).
struct GemmOperand {
  DType type = DType::kF32;
  const void* data = nullptr;  // F32 or BF16 elements; for kE4M3 the codes of `fp8`
  int64_t ld = 0;              // leading dimension in elements
  // true: element (r, k) at data[r * ld + k] (K contiguous); false: at data[k * ld + r].
  bool k_contiguous = true;
  // kE4M3 only: the codes and scales, as stored: [rows, K] (k_contiguous) or [K, rows] (not; then
  // 128x128 blocks, whose 128-slices of K are the same either way).
  const QuantizedMatrix* fp8 = nullptr;
};

// The dequantization scales of a blockwise panel: [ceil(kc/128)][tile] FP32, the scale of rows
// [r0, r0 + rows) at k0 + 128 s, 1 past `rows`. Every back-end's FP8 packers write them.
void pack_fp8_scales(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, float* scales);

// Packs rows [r0, r0 + rows) x k [k0, k0 + kc) of `op` into one micro-panel of `tile` rows:
// [ceil(kc/kg)][tile][kg] elements, zero past the matrix. Blockwise back-ends also write the
// dequantization scales of the panel: [ceil(kc/128)][tile] FP32 (1 past the matrix).
using PackPanelFn = void (*)(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc,
                             void* panel, float* scales);

// The same for the ceil(rows / tile) consecutive panels of rows [r0, r0 + rows), `panel_bytes`
// apart (their scales `scales_stride` floats apart): one call per cache block, for back-ends that
// read a source laid out across rows (k_contiguous false) better a block at a time than a panel at
// a time. The panels' bytes are PackPanelFn's.
using PackBlockFn = void (*)(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc,
                             void* panels, int64_t panel_bytes, float* scales, int64_t scales_stride);

// C tile [MR, NR] (row stride ldc) from panels covering kc elements of K. With `load_c` the
// accumulators start from C (a continued K block), else from zero. Blockwise kernels sum each
// 128-element slice separately and add slice * (sa[m] * sb[n]) to the running value in C.
using MicroKernelFn = void (*)(int64_t kc, const void* a_panel, const void* b_panel, const float* a_scales,
                               const float* b_scales, float* c, int64_t ldc, bool load_c);

struct GemmBackend {
  const char* name = "";
  int mr = 0, nr = 0;        // register tile
  int k_group = 1;           // elements of K per packed group (2: BF16 pairs)
  int element_bytes = 4;     // bytes per packed element
  bool blockwise = false;    // per-128-K slices with scales (FP8)
  int64_t kc_block = 256, mc_block = 192, nc_block = 1536;
  PackPanelFn pack_a = nullptr;
  PackPanelFn pack_b = nullptr;
  // Optional: packs a whole block in one call instead of pack_a / pack_b panel by panel.
  PackBlockFn pack_a_block = nullptr;
  PackBlockFn pack_b_block = nullptr;
  MicroKernelFn kernel = nullptr;
  // Optional: the same kernel with its output rounded to BF16 values (bf16_round_f32's bits) as
  // it is stored, for the last K block of a rounded product; without it the driver rounds the
  // finished tile in C.
  MicroKernelFn kernel_rounding = nullptr;
  // Optional: C = C + (the tile's product of one K block, formed from zero), the bits of forming
  // the product in a buffer and adding it to C, for accumulating products of a single K block
  // (load_c is always false); without it the driver forms the product in a local tile and adds it.
  MicroKernelFn kernel_adding = nullptr;
  void (*prepare)() = nullptr;  // run by each task before its first kernel (AMX: tile config)
};

struct GemmProblem {
  int64_t M = 0, N = 0, K = 0;
  GemmOperand a, b;
  float* c = nullptr;
  int64_t ldc = 0;
  bool accumulate = false;
  bool round_output_bf16 = false;  // GemmOptions::round_output_bf16
};

// Runs the problem on up to `threads` threads of kernel_thread_pool() (0: hardware_threads()).
void gemm_blocked(const GemmProblem& problem, const GemmBackend& backend, int threads);

// Back-ends. Each chooses the backend for an operand type; the AVX-512 ones exist only where
// the CPU has AVX-512 BF16 (resolve_isa() said kAvx512).
const GemmBackend& gemm_backend_portable(DType type);
const GemmBackend& gemm_backend_avx512(DType type);
// AVX2 + FMA (resolve_isa() said kAvx2).
const GemmBackend& gemm_backend_avx2(DType type);
// AMX (resolve_isa() said kAmx): BF16 and FP8 only; FP32 stays on the AVX-512 back-end.
const GemmBackend& gemm_backend_amx(DType type);

// FP32 problems small enough to run unpacked on the calling thread (gemm_direct_avx512.cc), with
// the AVX-512 back-end's bits; returns false, doing nothing, for any other problem (empty ones
// included). Call it only where resolve_isa() said kAvx512 or kAmx.
bool gemm_direct_f32_avx512(const GemmProblem& problem);
// The same for the AVX2 back-end (gemm_direct_avx2.cc), with its bits; only where resolve_isa()
// said kAvx2.
bool gemm_direct_f32_avx2(const GemmProblem& problem);

}  // namespace fp8rl::gemm_detail
