// AMX back-end of the blocked GEMM, BF16 and FP8 (needs AMX-TILE, AMX-BF16 and the AVX-512
// kernels; FP32 GEMMs stay on gemm_avx512.cc).
//
// Register tile 32 x 32 = four 16 x 16 FP32 accumulator tiles (tmm0-3), fed per 32-element chunk
// of K by two A tiles (rows 0-15, 16-31: tmm4-5) and two B tiles (columns 0-15, 16-31: tmm6-7).
//   A panel [ceil(kc/32) chunks][32 rows][32] bf16: one chunk of a row is one 64-byte tile row.
//   B panel [ceil(kc/32) chunks][16 pairs][32 columns][2] bf16: the AVX-512 back-end's pair layout
//     (zero pairs appended up to a whole chunk), which already is the tile layout AMX wants for B
//     (row p = pair p of K for every column); each B tile is read with a 128-byte row stride.
//   FP8: the AVX-512 packers decode the codes to BF16 exactly; the kernel sums each 128-slice of K
//     in zeroed tiles and promotes it into C with the two scales, multiply then add (section 4).
// Summation order: an AMX dot product adds one 32-element chunk into the accumulator in its own
// order (not the vdpbf16ps pair sequence; docs/kernels.md). Chunks start at k = 0 and at every
// kc_block, a multiple of 128, and K is zero-padded to a whole chunk: the decode GEMV's AMX path
// (gemv_amx.cc) runs the same chunks, so its rows are bit-identical to these.
#include <algorithm>
#include <cstring>

#include "core/aligned_buffer.h"
#include "numerics/bf16.h"
#include "kernels/gemm/gemm_blocked.h"
#include "numerics/quantized_tensor.h"
#include "numerics/simd_target.h"

FP8RL_AMX_BEGIN
#include "kernels/simd/amx_tiles_inl.h"      // inside the region by design (see that header)
#include "numerics/avx512_codec_inl.h"  // likewise

namespace fp8rl::gemm_detail {
namespace {

constexpr int kMr = 32;
constexpr int kNr = 32;
constexpr int64_t kChunkPairs = 16;  // pairs of K per tile dot product (32 elements)

int64_t chunks_of(int64_t kc) { return (kc + 2 * kChunkPairs - 1) / (2 * kChunkPairs); }

// Mask of the first min(n, 32) of 32 lanes (n >= 1).
uint32_t first_lanes_mask32(int64_t n) { return n >= 32 ? 0xFFFFFFFFu : (1u << n) - 1; }

// B: the AVX-512 pair layout [pairs][32][2] with zero pairs up to a whole chunk.
void pack_b_amx(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                float* scales) {
  gemm_backend_avx512(op.type).pack_b(op, r0, rows, tile, k0, kc, panel, scales);
  const int64_t pairs = (kc + 1) / 2, padded = chunks_of(kc) * kChunkPairs;
  std::memset(static_cast<uint32_t*>(panel) + pairs * tile, 0, static_cast<size_t>((padded - pairs) * tile) * 4);
}

// A from a BF16 source with K contiguous: each row's chunk is a plain (zero-padded) copy.
void pack_a_bf16_rows(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel) {
  const auto* src = static_cast<const bf16_t*>(op.data) + r0 * op.ld + k0;
  auto* out = static_cast<bf16_t*>(panel);
  for (int64_t c = 0; c < chunks_of(kc); ++c) {
    const __mmask32 valid = static_cast<__mmask32>(first_lanes_mask32(kc - 32 * c));
    for (int r = 0; r < tile; ++r) {
      const __m512i x = r < rows ? _mm512_maskz_loadu_epi16(valid, src + r * op.ld + 32 * c) : _mm512_setzero_si512();
      _mm512_store_si512(out + (c * tile + r) * 32, x);
    }
  }
}

// A from FP8 codes (K contiguous): each row's 64 codes are decoded exactly to BF16 straight into
// two chunks; scales [ceil(kc/128)][tile] as the AVX-512 packer writes them.
void pack_a_fp8_rows(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                     float* scales) {
  const avx512::E4m3Decoder decoder;
  const auto* codes = static_cast<const uint8_t*>(op.data) + r0 * op.ld + k0;
  auto* out = static_cast<bf16_t*>(panel);
  const int64_t chunks = chunks_of(kc);
  for (int r = 0; r < tile; ++r)
    for (int64_t c = 0; c < chunks; c += 2) {
      __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
      if (r < rows) decoder.decode64(_mm512_maskz_loadu_epi8(avx512::first_bytes_mask(kc - 32 * c), codes + r * op.ld + 32 * c), &lo, &hi);
      _mm512_store_si512(out + (c * tile + r) * 32, lo);
      if (c + 1 < chunks) _mm512_store_si512(out + ((c + 1) * tile + r) * 32, hi);
    }
  pack_fp8_scales(op, r0, rows, tile, k0, kc, scales);
}

// A: BF16 and FP8 with K contiguous are copied or decoded row by row; other sources are packed in
// the pair layout [pairs][32] words first, then each chunk's 16 pairs x 32 rows are transposed to
// [32 rows][16 pairs] (zero past the last pair).
void pack_a_amx(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                float* scales) {
  if (op.type == DType::kBF16 && op.k_contiguous) return pack_a_bf16_rows(op, r0, rows, tile, k0, kc, panel);
  if (op.type == DType::kE4M3 && op.k_contiguous) return pack_a_fp8_rows(op, r0, rows, tile, k0, kc, panel, scales);
  thread_local AlignedBuffer<uint32_t> pairs_layout;
  const int64_t pairs = (kc + 1) / 2, chunks = chunks_of(kc);
  if (pairs_layout.size() < static_cast<size_t>(chunks * kChunkPairs * tile))
    pairs_layout = AlignedBuffer<uint32_t>(static_cast<size_t>(chunks * kChunkPairs * tile));
  gemm_backend_avx512(op.type).pack_a(op, r0, rows, tile, k0, kc, pairs_layout.data(), scales);
  std::memset(pairs_layout.data() + pairs * tile, 0, static_cast<size_t>((chunks * kChunkPairs - pairs) * tile) * 4);
  auto* out = static_cast<uint32_t*>(panel);
  for (int64_t c = 0; c < chunks; ++c) {
    const uint32_t* src = pairs_layout.data() + c * kChunkPairs * tile;
    uint32_t* dst = out + c * kChunkPairs * tile;
    for (int half = 0; half < tile / 16; ++half) {
      __m512i v[16];  // v[p] = pair p of rows 16 half .. 16 half + 15
      for (int p = 0; p < 16; ++p) v[p] = _mm512_loadu_si512(src + p * tile + 16 * half);
      amx::transpose16x16_epi32(v);
      for (int r = 0; r < 16; ++r) _mm512_storeu_si512(dst + (16 * half + r) * kChunkPairs, v[r]);
    }
  }
}

// tmm4/5 = A rows 0-15/16-31 and tmm6/7 = B columns 0-15/16-31 of chunk c; tmm0-3 += A B.
inline void dot_chunk(const uint8_t* a, const uint8_t* b, int64_t c) {
  const uint8_t* ac = a + c * kMr * 64;
  const uint8_t* bc = b + c * kChunkPairs * kNr * 4;
  _tile_loadd(4, ac, 64);
  _tile_loadd(5, ac + 16 * 64, 64);
  _tile_loadd(6, bc, kNr * 4);
  _tile_loadd(7, bc + 64, kNr * 4);
  _tile_dpbf16ps(0, 4, 6);
  _tile_dpbf16ps(1, 4, 7);
  _tile_dpbf16ps(2, 5, 6);
  _tile_dpbf16ps(3, 5, 7);
}

void zero_accumulators() {
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
}

// The four accumulator tiles to a 32 x 32 FP32 block with row stride ld.
void store_accumulators(float* c, int64_t ld) {
  _tile_stored(0, c, ld * 4);
  _tile_stored(1, c + 16, ld * 4);
  _tile_stored(2, c + 16 * ld, ld * 4);
  _tile_stored(3, c + 16 * ld + 16, ld * 4);
}

// kRound: the output is rounded to BF16 values on its way to C (the last K block of a rounded
// product); the tiles go through an L1 block first.
template <bool kRound>
void kernel_bf16(int64_t kc, const void* a_panel, const void* b_panel, const float*, const float*, float* c,
                 int64_t ldc, bool load_c) {
  if (load_c) {
    _tile_loadd(0, c, ldc * 4);
    _tile_loadd(1, c + 16, ldc * 4);
    _tile_loadd(2, c + 16 * ldc, ldc * 4);
    _tile_loadd(3, c + 16 * ldc + 16, ldc * 4);
  } else {
    zero_accumulators();
  }
  const auto* a = static_cast<const uint8_t*>(a_panel);
  const auto* b = static_cast<const uint8_t*>(b_panel);
  for (int64_t ch = 0; ch < chunks_of(kc); ++ch) dot_chunk(a, b, ch);
  if constexpr (kRound) {
    alignas(64) float block[kMr * kNr];
    store_accumulators(block, kNr);
    for (int m = 0; m < kMr; ++m)
      for (int v = 0; v < kNr / 16; ++v)
        _mm512_storeu_ps(c + m * ldc + 16 * v, avx512::bf16_round16(_mm512_load_ps(block + m * kNr + 16 * v)));
  } else {
    store_accumulators(c, ldc);
  }
}

// to = from + slice * (s_a * s_b) for the 32 x 32 block of slice `s`: the promotion, as in the
// AVX-512 kernel and the twin. `from` is the running value (nullptr: zero, as 0 + x), `to` where
// it goes; with kRound the result is rounded to BF16 values on the way (the last slice into C).
// Between slices the running value lives in a contiguous 32 x 32 block in L1 (C's rows are
// often 4 KiB apart, and 32 of them would compete for the same L1 sets at every slice), so C is
// read once (a continued K block) and written once.
template <bool kRound>
inline void promote(const float* slice, int64_t s, const float* sa, const float* sb, const float* from, int64_t ld_from,
                    float* to, int64_t ld_to) {
  const __m512 scale_b[2] = {_mm512_loadu_ps(sb + s * kNr), _mm512_loadu_ps(sb + s * kNr + 16)};
  for (int m = 0; m < kMr; ++m) {
    const __m512 scale_a = _mm512_set1_ps(sa[s * kMr + m]);
    for (int v = 0; v < kNr / 16; ++v) {
      const __m512 prev = from != nullptr ? _mm512_loadu_ps(from + m * ld_from + 16 * v) : _mm512_setzero_ps();
      __m512 x = _mm512_add_ps(
          prev, _mm512_mul_ps(_mm512_load_ps(slice + m * kNr + 16 * v), _mm512_mul_ps(scale_a, scale_b[v])));
      if constexpr (kRound) x = avx512::bf16_round16(x);
      _mm512_storeu_ps(to + m * ld_to + 16 * v, x);
    }
  }
}

template <bool kRound>  // as in kernel_bf16
void kernel_fp8(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                int64_t ldc, bool load_c) {
  const auto* a = static_cast<const uint8_t*>(a_panel);
  const auto* b = static_cast<const uint8_t*>(b_panel);
  constexpr int64_t kSliceChunks = kQuantBlock / (2 * kChunkPairs);
  const int64_t chunks = chunks_of(kc), slices = (chunks + kSliceChunks - 1) / kSliceChunks;
  alignas(64) float running[kMr * kNr];
  // Promotes slice s from its buffer: the first starts from C (or zero), the last ends in C.
  auto promote_slice = [&](const float* slice, int64_t s) {
    const float* from = s > 0 ? running : load_c ? c : nullptr;
    const int64_t ld_from = s > 0 ? kNr : ldc;
    if (s + 1 < slices) return promote<false>(slice, s, sa, sb, from, ld_from, running, kNr);
    promote<kRound>(slice, s, sa, sb, from, ld_from, c, ldc);
  };
  // Software-pipelined: the tile products of slice s are issued before the promotion of slice
  // s - 1 (from the other buffer), so the AVX-512 promotion runs while the tile unit works.
  alignas(64) float slice[2][kMr * kNr];
  for (int64_t s = 0; s < slices; ++s) {
    zero_accumulators();
    for (int64_t ch = s * kSliceChunks; ch < std::min(chunks, (s + 1) * kSliceChunks); ++ch) dot_chunk(a, b, ch);
    if (s > 0) promote_slice(slice[(s - 1) % 2], s - 1);
    store_accumulators(slice[s % 2], kNr);
  }
  promote_slice(slice[(slices - 1) % 2], slices - 1);
}

GemmBackend make_backend(DType type) {
  GemmBackend be;
  be.mr = kMr;
  be.nr = kNr;
  be.k_group = 2;
  be.element_bytes = 2;
  be.kc_block = 512;  // A and B panels 32 KiB each; a multiple of 128 (FP8 slices) and of 32 (chunks)
  be.mc_block = 128;  // A block 128 KiB and B block 1 MiB in L2 (tuned on 1024^3 .. 640x768x256)
  be.nc_block = 1024;
  be.pack_a = pack_a_amx;
  be.pack_b = pack_b_amx;
  be.prepare = amx::configure_16x64_tiles;
  if (type == DType::kE4M3) {
    be.name = "amx-fp8";
    be.blockwise = true;
    be.kernel = kernel_fp8<false>;
    be.kernel_rounding = kernel_fp8<true>;
  } else {
    be.name = "amx-bf16";
    be.kernel = kernel_bf16<false>;
    be.kernel_rounding = kernel_bf16<true>;
  }
  return be;
}

}  // namespace

const GemmBackend& gemm_backend_amx(DType type) {
  static const GemmBackend bf16 = make_backend(DType::kBF16);
  static const GemmBackend fp8 = make_backend(DType::kE4M3);
  return type == DType::kE4M3 ? fp8 : bf16;
}

}  // namespace fp8rl::gemm_detail

FP8RL_AMX_END
