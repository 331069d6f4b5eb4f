// Decode GEMV: y[M, N] = x[M, K] . W[N, K]^T for M = 1..16 sequences sharing one pass over the
// weights (the generator's linear layers during decode), with W packed once per refit.
//
// Weights: BF16, or FP8 E4M3 codes with 128x128 block scales (the trainer's forward bytes and
// scales, repacked). Activations: BF16 (any W), or FP8 1x128 (W8A8, FP8 W only).
// Semantics, per output element (the scalar twins are in reference/gemv_reference.h):
//   BF16 W, BF16 x : as gemm_nt_bf16.
//   FP8 W,  FP8 x  : as gemm_nt_fp8 (every 128-slice of K summed in FP32, then
//                    running += slice * (s_x * s_w)).
//   FP8 W,  BF16 x : the same with s_x = 1 (running += slice * s_w).
// Batch invariance (GemvOptions::batch_invariant): for the same ISA, every row of y is
// bit-identical to the corresponding row of gemm_nt_bf16 / gemm_nt_fp8, and does not depend on M
// or on the other rows (both kernels run the same dot-product sequence per output element);
// tests/kernels/gemv_test.cc pins it.
//
// Packed layout (docs/kernels.md): W's rows in strips of 16 (N padded with zero rows), each strip
// contiguous, K in pairs:
//   BF16: strip [ceil(K/2) pairs][16 rows][2] bf16 = 64 bytes per pair, the vdpbf16ps operand.
//   FP8 : strip [ceil(K/4) chunks][64 bytes]; a chunk holds two pairs [2][16 rows][2] codes,
//         stored in the byte order that the vpermi2b decode turns into the two BF16 operands
//         without a further permute (lane q of the chunk = codes 8q..8q+7 then 32+8q..32+8q+7
//         of the natural order). Scales: [ceil(N/128)][ceil(K/128)] f32, as the 128x128 source.
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/dtype.h"
#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"
#include "numerics/scale.h"

namespace fp8rl {

inline constexpr int64_t kGemvMaxRows = 16;  // M per call (more sequences: call per group of 16)
inline constexpr int64_t kGemvStrip = 16;    // rows of W per strip

struct PackedGemvWeights {
  DType type = DType::kBF16;
  int64_t rows = 0;  // N
  int64_t cols = 0;  // K
  AlignedBuffer<uint8_t> data;   // the strips, see above
  AlignedBuffer<float> scales;   // FP8: [ceil(N/128)][ceil(K/128)]
  int64_t strips() const { return (rows + kGemvStrip - 1) / kGemvStrip; }
  int64_t strip_bytes() const {  // bytes of one strip
    return type == DType::kE4M3 ? (cols + 3) / 4 * 64 : (cols + 1) / 2 * 64;
  }
  int64_t weight_bytes() const { return static_cast<int64_t>(data.size()); }
};

struct GemvOptions {
  Isa isa = Isa::kAuto;
  int threads = 0;  // 0: hardware_threads(); results are the same for any count
  // On, every row is the GEMM's row bit for bit (see above). Off, a call may take a faster path
  // whose rows are not: with M = 1 on an AMX machine, the AVX-512 kernels (their bits, those of
  // FP8RL_ISA=avx512), which decode FP8 in registers instead of into tiles.
  bool batch_invariant = false;
  // y is rounded to BF16 values (bf16_round_f32) by the task that computed it, while it is in that
  // core's cache; the same bits as rounding afterwards.
  bool round_output_bf16 = false;
};

// Packs BF16 W [N, K] (row stride ldw) into `out` (storage reused when the shape matches).
void pack_gemv_weights_bf16(const bf16_t* W, int64_t N, int64_t K, int64_t ldw, PackedGemvWeights& out,
                            const GemvOptions& options = {});
// Repacks an FP8 W quantized 128x128 ([N, K] codes and scales) without changing a byte or a scale.
void pack_gemv_weights_fp8(const QuantizedMatrix& W, PackedGemvWeights& out, const GemvOptions& options = {});
// Quantizes the FP32 master W [N, K] (row stride ldw) in 128x128 blocks (the same bytes and scales
// as quantize(..., kBlocks128x128, format)) straight into the packed layout: the refit path.
void pack_gemv_weights_fp8(const float* W, int64_t N, int64_t K, int64_t ldw, ScaleFormat format,
                           PackedGemvWeights& out, const GemvOptions& options = {});

// y [M, N] (row stride ldy) = x [M, K] BF16 (row stride ldx) . W^T, M in 1..16.
void gemv_bf16(const PackedGemvWeights& W, int64_t M, const bf16_t* x, int64_t ldx, float* y, int64_t ldy,
               const GemvOptions& options = {});
// W8A8: x is FP8 1x128 [M, K] (M in 1..16); W must be FP8.
void gemv_fp8(const PackedGemvWeights& W, const QuantizedMatrix& x, float* y, int64_t ldy,
              const GemvOptions& options = {});

// Several weight matrices with the same K applied to the same activations (the generator's q, k,
// v, or gate and up): targets[i].y = x . targets[i].W^T. The activations are packed once and the
// strips of all the matrices are shared out in one pass of the pool; each output gets the bits
// of the single-matrix call.
struct GemvTarget {
  const PackedGemvWeights* W = nullptr;
  float* y = nullptr;  // [M, W->rows], row stride ldy
  int64_t ldy = 0;
};
void gemv_bf16(const GemvTarget* targets, int num_targets, int64_t M, const bf16_t* x, int64_t ldx,
               const GemvOptions& options = {});
void gemv_fp8(const GemvTarget* targets, int num_targets, const QuantizedMatrix& x, const GemvOptions& options = {});

// From how many rows a product with `weights` (kBF16 or kE4M3) runs faster as one GEMM than as
// GEMV calls of kGemvMaxRows rows each; the rows' bits are the same either way. The BF16 GEMV
// reads its strips in place and beats the GEMM's packing up to 4 passes; the FP8 GEMV decodes the
// codes again on every pass (the GEMM once, while packing), which the AVX-512 decoder affords for
// 4 passes and the AVX2 one for 1; AMX runs the GEMM on tiles from the second pass. Measured in
// docs/generation.md ("GEMV or GEMM per forward").
int64_t gemm_from_rows(DType weights);

}  // namespace fp8rl
