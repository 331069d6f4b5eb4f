// AMX back-end of the decode GEMV (layouts in gemv.h and gemv_kernels.h).
//
// Up to four strips of W (16 rows each) at a time, one 16 x 16 FP32 accumulator tile per strip
// (tmm0-3); per 32-element chunk of K one A tile holds the M <= 16 sequences' activations (tmm4,
// rows past M zero) and one B tile per strip the chunk's 16 pairs x 16 rows of W (tmm5-7):
//   BF16 W: 16 consecutive pairs of a strip already are the B tile (64-byte rows), read in place;
//   FP8 W:  the tile's 8 chunks of codes are decoded exactly to BF16 into an L1 buffer first.
// Each output element sees the same chunk sequence as in the AMX GEMM (gemm_amx.cc): from zero,
// one tile dot product per chunk of K in order, K zero-padded to a whole chunk, and for FP8 one
// such sum per 128-slice promoted as running = running + slice * (s_x * s_w). That is what makes
// the rows bit-identical to the GEMM's and independent of M.
#include <algorithm>
#include <cstring>

#include "kernels/gemv/gemv_kernels.h"
#include "numerics/codec.h"
#include "numerics/simd_target.h"

FP8RL_AMX_BEGIN
#include "kernels/simd/amx_tiles_inl.h"      // inside the region by design (see that header)
#include "numerics/avx512_codec_inl.h"  // likewise

namespace fp8rl::gemv_detail {
namespace {

constexpr int kGroup = 4;             // strips per group: accumulator tiles tmm0-3
constexpr int64_t kChunkPairs = 16;   // pairs of K per tile dot product
constexpr int64_t kTileBytes = 1024;  // 16 rows x 64 bytes
constexpr int64_t kFp8TileBytes = 512;  // the codes of one FP8 B tile

// tmm{i} += tmm4 . B, with B loaded into one of tmm5-7 (tile numbers must be literals).
inline void dot_strip(int i, const void* b) {
  switch (i) {
    case 0: _tile_loadd(5, b, 64); _tile_dpbf16ps(0, 4, 5); break;
    case 1: _tile_loadd(6, b, 64); _tile_dpbf16ps(1, 4, 6); break;
    case 2: _tile_loadd(7, b, 64); _tile_dpbf16ps(2, 4, 7); break;
    default: _tile_loadd(5, b, 64); _tile_dpbf16ps(3, 4, 5); break;
  }
}

inline void store_accumulator(int i, float* out) {
  switch (i) {
    case 0: _tile_stored(0, out, 64); break;
    case 1: _tile_stored(1, out, 64); break;
    case 2: _tile_stored(2, out, 64); break;
    default: _tile_stored(3, out, 64); break;
  }
}

inline void zero_accumulators() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// Rows m < M of a [16][16] tile image into y (the columns of strip s below N).
void store_rows(const float* tile, int64_t M, const GemvDst& dst, int64_t s, int64_t N) {
  const int64_t n0 = s * kGemvStrip, left = std::min<int64_t>(16, N - n0);
  const auto mask = static_cast<__mmask16>((1u << left) - 1);
  for (int64_t m = 0; m < M; ++m) {
    __m512 v = _mm512_load_ps(tile + m * 16);
    if (dst.round_bf16) v = avx512::bf16_round16(v);
    _mm512_mask_storeu_ps(dst.y + m * dst.ldy + n0, mask, v);
  }
}

// B tile of chunk c of a BF16 strip: in place when the chunk is whole, else a zero-padded copy.
const uint8_t* bf16_tile(const uint8_t* strip, int64_t pairs, int64_t c, uint8_t* scratch) {
  if ((c + 1) * kChunkPairs <= pairs) return strip + c * kTileBytes;
  const int64_t have = pairs - c * kChunkPairs;
  std::memcpy(scratch, strip + c * kTileBytes, static_cast<size_t>(have * 64));
  std::memset(scratch + have * 64, 0, static_cast<size_t>((kChunkPairs - have) * 64));
  return scratch;
}

// B tile of chunk c of an FP8 strip (8 code chunks of 2 pairs each), decoded to BF16 into `out`.
void decode_fp8_tile(const uint8_t* strip, int64_t code_chunks, int64_t c, const avx512::E4m3Decoder& dec,
                     uint8_t* out) {
  for (int64_t q = 0; q < kChunkPairs / 2; ++q) {
    const int64_t j = c * (kChunkPairs / 2) + q;
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
    if (j < code_chunks) dec.decode64_lane_order(_mm512_load_si512(strip + j * 64), &lo, &hi);
    _mm512_store_si512(out + (2 * q) * 64, lo);
    _mm512_store_si512(out + (2 * q + 1) * 64, hi);
  }
}

void bf16_group(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s, int S) {
  const int64_t pairs = (W.cols + 1) / 2, chunks = (pairs + kChunkPairs - 1) / kChunkPairs;
  const int64_t strip_bytes = W.strip_bytes();
  alignas(64) uint8_t scratch[kTileBytes];
  alignas(64) float out[16 * 16];
  zero_accumulators();
  for (int64_t c = 0; c < chunks; ++c) {
    _tile_loadd(4, x.tiles.data() + c * 256, 64);
    for (int i = 0; i < S; ++i) dot_strip(i, bf16_tile(W.data.data() + (s + i) * strip_bytes, pairs, c, scratch));
  }
  for (int i = 0; i < S; ++i) {
    store_accumulator(i, out);
    store_rows(out, x.M, dst, s + i, W.rows);
  }
}

void fp8_group(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s, int S,
               const avx512::E4m3Decoder& dec) {
  const int64_t K = W.cols, pairs = (K + 1) / 2, chunks = (pairs + kChunkPairs - 1) / kChunkPairs;
  const int64_t code_chunks = (K + 3) / 4, slices = (K + kQuantBlock - 1) / kQuantBlock, strip_bytes = W.strip_bytes();
  constexpr int64_t kSliceChunks = kQuantBlock / (2 * kChunkPairs);
  // kAhead + 1 sets of B buffers, one tile per strip: chunk c + kAhead is decoded while the tile
  // loads of chunk c read an older set (a tile load waits until the stores it reads have
  // reached the cache, so they must be issued well before it).
  constexpr int64_t kAhead = 2;
  alignas(64) uint8_t b[kAhead + 1][kGroup][kTileBytes];
  alignas(64) float slice[16 * 16];
  alignas(64) float running[kGroup][16 * 16];
  for (int i = 0; i < S; ++i)
    for (int64_t m = 0; m < x.M; ++m) _mm512_store_ps(running[i] + m * 16, _mm512_setzero_ps());
  // The codes of chunk c + kPrefetch are requested while chunk c is decoded: the decode is the
  // slow part of this path, and without the hint its loads wait on memory (+30 % on cold
  // 8192 x 8192 weights, one thread).
  constexpr int64_t kPrefetch = 4;
  auto decode = [&](int64_t c) {
    for (int i = 0; i < S; ++i) {
      const uint8_t* strip = W.data.data() + (s + i) * strip_bytes;
      if ((c + kPrefetch + 1) * kFp8TileBytes <= strip_bytes)
        for (int64_t line = 0; line < kFp8TileBytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(strip + (c + kPrefetch) * kFp8TileBytes + line), _MM_HINT_T0);
      decode_fp8_tile(strip, code_chunks, c, dec, b[c % (kAhead + 1)][i]);
    }
  };
  for (int64_t c = 0; c < std::min(kAhead, chunks); ++c) decode(c);
  for (int64_t j = 0; j < slices; ++j) {
    zero_accumulators();
    for (int64_t c = j * kSliceChunks; c < std::min(chunks, (j + 1) * kSliceChunks); ++c) {
      if (c + kAhead < chunks) decode(c + kAhead);
      _tile_loadd(4, x.tiles.data() + c * 256, 64);
      for (int i = 0; i < S; ++i) dot_strip(i, b[c % (kAhead + 1)][i]);
    }
    for (int i = 0; i < S; ++i) {
      store_accumulator(i, slice);
      const int64_t block_row = (s + i) * kGemvStrip / kQuantBlock;
      const float sw = W.scales[static_cast<size_t>(block_row * slices + j)];
      for (int64_t m = 0; m < x.M; ++m) {
        const __m512 scale = _mm512_set1_ps(x.scales[static_cast<size_t>(m * slices + j)] * sw);
        float* r = running[i] + m * 16;
        _mm512_store_ps(r, _mm512_add_ps(_mm512_load_ps(r), _mm512_mul_ps(_mm512_load_ps(slice + m * 16), scale)));
      }
    }
  }
  for (int i = 0; i < S; ++i) store_rows(running[i], x.M, dst, s + i, W.rows);
}

}  // namespace

void gemv_strips_amx(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                     int64_t s1) {
  amx::configure_tiles(static_cast<int>(x.M));  // A and accumulators: M rows (a product costs M rows)
  const avx512::E4m3Decoder dec;
  for (int64_t s = s0; s < s1; s += kGroup) {
    const int S = static_cast<int>(std::min<int64_t>(kGroup, s1 - s));
    if (W.type == DType::kBF16) {
      bf16_group(W, x, dst, s, S);
    } else {
      fp8_group(W, x, dst, s, S, dec);
    }
  }
}

}  // namespace fp8rl::gemv_detail

FP8RL_AMX_END
