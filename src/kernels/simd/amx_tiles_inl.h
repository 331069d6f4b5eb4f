// AMX building blocks shared by the AMX kernel files (gemm_amx.cc, gemv_amx.cc, the bench).
//
// Include this only inside an FP8RL_AMX_BEGIN ... FP8RL_AMX_END region (see simd_target.h).
// The tile configuration belongs to a thread: every task that runs AMX instructions calls
// configure_tiles() first (the kernel thread pool reuses threads, and another library may
// have loaded a different configuration in between).
#pragma once

#include <cstdint>

#include "numerics/simd_target.h"

namespace fp8rl::amx {
namespace {

// The 64-byte operand of LDTILECFG (palette 1).
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 64 bytes wide (16 FP32 accumulators or 32 BF16 operands per row); tiles 0-4 have
// `rows` rows (the accumulators and the A operand of a product with fewer rows), tiles 5-7 have 16.
inline void configure_tiles(int rows) {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.bytes_per_row[t] = 64;
    config.rows[t] = static_cast<uint8_t>(t < 5 ? rows : 16);
  }
  // Not _tile_loadconfig(): GCC 12 does not see that its builtin reads all 64 bytes and drops the
  // stores above; an asm with the whole struct as a memory operand keeps them.
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

// All eight tiles 16 rows x 64 bytes.
inline void configure_16x64_tiles() { configure_tiles(16); }

// In-register transpose of a 16 x 16 matrix of 32-bit words (v[r] = row r on entry, column r on
// exit). Four rounds; in the round of block size b, rows r and r + b (bit b of r clear) swap their
// off-diagonal b-lane blocks: row r takes lanes i - b of row r + b where bit b of i is set, row
// r + b takes lanes i + b of row r where it is clear.
inline void transpose16x16_epi32(__m512i (&v)[16]) {
  for (int b = 8; b >= 1; b /= 2) {
    alignas(64) int32_t lo[16], hi[16];
    for (int i = 0; i < 16; ++i) {
      lo[i] = (i & b) ? 16 + i - b : i;  // an index >= 16 picks from the second source
      hi[i] = (i & b) ? 16 + i : i + b;
    }
    const __m512i idx_lo = _mm512_load_si512(lo), idx_hi = _mm512_load_si512(hi);
    for (int r = 0; r < 16; ++r) {
      if (r & b) continue;
      const __m512i x = v[r], y = v[r + b];
      v[r] = _mm512_permutex2var_epi32(x, idx_lo, y);
      v[r + b] = _mm512_permutex2var_epi32(x, idx_hi, y);
    }
  }
}

}  // namespace
}  // namespace fp8rl::amx
