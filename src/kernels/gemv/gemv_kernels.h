// Internal interface between the decode-GEMV dispatcher (gemv.cc) and its ISA back-ends
// (gemv_portable.cc, gemv_avx512.cc). Layouts are those of gemv.h.
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "kernels/gemv/gemv.h"

namespace fp8rl::gemv_detail {

// Activations packed for the kernels:
//   pairs  [ceil(K/2)][M] 32-bit words, each a BF16 pair (x[m][2p], x[m][2p+1]), zero past K,
//          so one cache line holds pair p of every sequence;
//   scales [M][ceil(K/128)] f32 dequantization scales of x (1 for BF16 activations);
//   tiles  the AMX path's layout instead of `pairs`: [ceil(K/32)][16 rows][16 pairs] words, chunk
//          c of K for every sequence as one 16 x 64-byte AMX tile, rows past M and pairs past K
//          zero.
struct PackedActivations {
  int64_t M = 0, K = 0;
  AlignedBuffer<uint32_t> pairs;
  AlignedBuffer<float> scales;
  AlignedBuffer<uint32_t> tiles;
};

// Byte position, inside a 64-byte FP8 chunk, of natural byte i (i = 32 * pair + 2 * row + k).
// The chunk stores natural byte order[j] at position j (see gemv.h); this is the inverse.
int fp8_chunk_position(int natural);

// Where a kernel writes y [M, N] (row stride ldy); with round_bf16 the values are rounded to BF16
// (bf16_round_f32's bits) in registers before they are stored.
struct GemvDst {
  float* y = nullptr;
  int64_t ldy = 0;
  bool round_bf16 = false;
};

// y[:, 16 s0 : 16 s1] for the strips [s0, s1) (columns past N are not written).
void gemv_strips_portable(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                          int64_t s1);
void gemv_strips_avx512(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                        int64_t s1);
void gemv_strips_avx2(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                      int64_t s1);
void gemv_strips_amx(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                     int64_t s1);  // needs x.tiles

// Pack `rows` rows (<= 16 * strips) of codes [rows, K] (row stride ld) into consecutive strips
// at `out`, zero-padding rows and K.
void pack_fp8_strips_portable(const uint8_t* codes, int64_t rows, int64_t K, int64_t ld, uint8_t* out);
void pack_fp8_strips_avx512(const uint8_t* codes, int64_t rows, int64_t K, int64_t ld, uint8_t* out);
void pack_bf16_strips_portable(const bf16_t* w, int64_t rows, int64_t K, int64_t ld, uint8_t* out);
void pack_bf16_strips_avx512(const bf16_t* w, int64_t rows, int64_t K, int64_t ld, uint8_t* out);

}  // namespace fp8rl::gemv_detail
