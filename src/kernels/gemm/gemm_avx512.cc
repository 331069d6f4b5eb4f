// AVX-512 back-end of the blocked GEMM (needs AVX-512 F/BW/VL/DQ/VBMI and BF16).
//
// Register tile 8 x 48: 24 FP32 accumulators (8 rows x 3 vectors of 16 columns), three B
// vectors, A broadcast from memory.
//   BF16 and FP8: vdpbf16ps on BF16 pairs. A panel [ceil(kc/2)][8][2] bf16, B panel
//     [ceil(kc/2)][48][2] bf16: for every pair of K, the 48 columns' two values side by side,
//     which is the operand layout of vdpbf16ps (lane n of a vector = pair (k, k+1) of column n).
//   FP8: E4M3 codes are decoded exactly to BF16 while packing (vpermi2b tables), scales packed
//     as [ceil(kc/128)][tile] f32; the kernel sums each 128-slice of K in 24 zeroed accumulators
//     and promotes it into C with the two scales (docs/recipe.md section 4).
//   FP32: A panel [kc][8] f32, B panel [kc][48] f32, vfmadd231ps.
#include <algorithm>
#include <climits>
#include <cstring>

#include "core/aligned_buffer.h"
#include "core/check.h"
#include "kernels/gemm/gemm_blocked.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see that header)

namespace fp8rl::gemm_detail {
namespace {

constexpr int kMr = 8;
constexpr int kNr = 48;
constexpr int kNv = kNr / 16;  // accumulator vectors per row

// ---- packing -------------------------------------------------------------------------------

// The words of 8 rows x 16 groups (r[i]: row i's words 0..15) transposed: o[k] holds group 2k's
// 8 words (rows 0..7), then group 2k+1's.
inline void transpose_8x16(const __m512i r[8], __m512i o[8]) {
  __m512i t[8], u[8], v[4], w[4];
  for (int i = 0; i < 4; ++i) {  // per 128-bit lane L: t[2i] = (row 2i, 2i+1) words 4L, 4L+1 interleaved
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  for (int h = 0; h < 2; ++h) {  // u[4h + j], lane L: group 4L + j, rows 4h .. 4h + 3
    u[4 * h + 0] = _mm512_unpacklo_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 1] = _mm512_unpackhi_epi64(t[4 * h], t[4 * h + 2]);
    u[4 * h + 2] = _mm512_unpacklo_epi64(t[4 * h + 1], t[4 * h + 3]);
    u[4 * h + 3] = _mm512_unpackhi_epi64(t[4 * h + 1], t[4 * h + 3]);
  }
  for (int j = 0; j < 4; ++j) {  // v[j]: groups j, 4 + j; w[j]: groups 8 + j, 12 + j (rows 0-3, then 4-7)
    v[j] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44);
    w[j] = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xEE);
  }
  o[0] = _mm512_shuffle_i32x4(v[0], v[1], 0x88), o[1] = _mm512_shuffle_i32x4(v[2], v[3], 0x88);
  o[2] = _mm512_shuffle_i32x4(v[0], v[1], 0xDD), o[3] = _mm512_shuffle_i32x4(v[2], v[3], 0xDD);
  o[4] = _mm512_shuffle_i32x4(w[0], w[1], 0x88), o[5] = _mm512_shuffle_i32x4(w[2], w[3], 0x88);
  o[6] = _mm512_shuffle_i32x4(w[0], w[1], 0xDD), o[7] = _mm512_shuffle_i32x4(w[2], w[3], 0xDD);
}

// The driver packs panels of consecutive rows, so the lines the next panel reads lie `panel_bytes`
// past the ones this one reads. Its rows are a panel's worth of separate streams (48 for B), more
// than the hardware prefetcher follows: fetching them one panel ahead took the LM head's product
// (110 x 151,936 x 1,024, a new pass over its weight per chunk of rows) from 0.44 to 0.55 of the
// peak (230 -> 288 GFLOP/s of 522, Zen 5). Past the matrix the hint does nothing (a prefetch
// never faults).
inline void prefetch_next_panel(const uint8_t* line, int64_t panel_bytes) {
  _mm_prefetch(reinterpret_cast<const char*>(line + panel_bytes), _MM_HINT_T0);
}

// out[g * tile + r] = word g of row r for r < rows, 0 for the padding rows; g < groups. One
// "word" is a BF16 pair or one FP32 value; `load(row, g0, n)` gives words g0 .. g0 + n - 1 of a
// row (n <= 16, zeros past them). Tiles of 8 (A) or a multiple of 16 (B): blocks of 8 rows x 16
// words are loaded and transposed in registers.
template <typename LoadWords>
void pack_rows_with(const LoadWords& load, int rows, int tile, int64_t groups, uint32_t* out) {
  for (int64_t g0 = 0; g0 < groups; g0 += 16) {
    const int n = static_cast<int>(std::min<int64_t>(16, groups - g0));
    for (int r0 = 0; r0 < tile; r0 += 16) {
      __m512i o[2][8];
      for (int half = 0; half < (tile == 8 ? 1 : 2); ++half) {
        __m512i r[8];
        for (int i = 0; i < 8; ++i) {
          const int row = r0 + 8 * half + i;
          r[i] = row < rows ? load(row, g0, n) : _mm512_setzero_si512();
        }
        transpose_8x16(r, o[half]);
      }
      for (int k = 0; k < 8 && 2 * k < n; ++k) {
        if (tile == 8) {  // groups 2k and 2k + 1, 8 words each
          uint32_t* dst = out + (g0 + 2 * k) * 8;
          if (2 * k + 1 < n)
            _mm512_storeu_si512(dst, o[0][k]);
          else
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_castsi512_si256(o[0][k]));
          continue;
        }
        // 16 rows: group 2k is the low halves of the two 8-row transposes, group 2k + 1 the high.
        _mm512_storeu_si512(out + (g0 + 2 * k) * tile + r0, _mm512_shuffle_i32x4(o[0][k], o[1][k], 0x44));
        if (2 * k + 1 < n)
          _mm512_storeu_si512(out + (g0 + 2 * k + 1) * tile + r0, _mm512_shuffle_i32x4(o[0][k], o[1][k], 0xEE));
      }
    }
  }
}

// pack_rows_with on 32-bit words stored at base + row * ld_bytes + 4 g.
void pack_words_rows(const uint8_t* base, int64_t ld_bytes, int rows, int tile, int64_t groups, uint32_t* out) {
  pack_rows_with(
      [&](int row, int64_t g0, int n) {
        const uint8_t* line = base + row * ld_bytes + 4 * g0;
        prefetch_next_panel(line, tile * ld_bytes);
        return _mm512_maskz_loadu_epi32(static_cast<__mmask16>((1u << n) - 1), line);
      },
      rows, tile, groups, out);
}

// BF16 source with K contiguous: rows [r0, r0+rows), k [k0, k0+kc) -> [ceil(kc/2)][tile] pairs.
void pack_bf16_rows(const bf16_t* src, int64_t ld, int64_t r0, int rows, int tile, int64_t k0, int64_t kc,
                    uint32_t* out) {
  const bf16_t* base = src + r0 * ld + k0;
  const int64_t full = kc / 2;
  pack_words_rows(reinterpret_cast<const uint8_t*>(base), ld * 2, rows, tile, full, out);
  if (kc % 2)  // last pair: the element k0+kc-1 and a zero (never read past the row)
    for (int r = 0; r < tile; ++r) out[full * tile + r] = r < rows ? base[r * ld + kc - 1] : 0u;
}

// The vpermt2w indices that interleave two rows of 32 BF16 values (lo = row k, hi = row k + 1):
// word i of the result is column i / 2 of row k (i even) or of row k + 1 (i odd); adding 16 to
// every index gives columns 16 .. 31.
inline __m512i interleave_first() {
  return _mm512_set_epi16(47, 15, 46, 14, 45, 13, 44, 12, 43, 11, 42, 10, 41, 9, 40, 8, 39, 7, 38, 6, 37, 5, 36, 4, 35,
                          3, 34, 2, 33, 1, 32, 0);
}

// A source with rows contiguous (element (r, k) of row k, column r): each pair interleaves two
// consecutive source rows k, k+1, 32 columns at a time (one vpermt2w per 16 pairs).
// `load(k, v, mask)` gives the BF16 values of columns v .. v + 31 of source row k where `mask`
// is set, zeros elsewhere.
template <typename LoadColumns>
void pack_cols_with(const LoadColumns& load, int rows, int tile, int64_t kc, uint32_t* out) {
  const __m512i first = interleave_first(), second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
  for (int64_t g = 0; g * 2 < kc; ++g) {
    const bool has_odd = 2 * g + 1 < kc;
    for (int v = 0; v < tile; v += 32) {
      const int left = std::clamp(rows - v, 0, 32);
      const __mmask32 m = left == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
      const __m512i lo = load(2 * g, v, m);
      const __m512i hi = has_odd ? load(2 * g + 1, v, m) : _mm512_setzero_si512();
      uint32_t* dst = out + g * tile + v;
      const __m512i w0 = _mm512_permutex2var_epi16(lo, first, hi);
      if (tile - v >= 16) {
        _mm512_storeu_si512(dst, w0);
      } else {  // tile 8
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst), _mm512_castsi512_si256(w0));
      }
      if (tile - v > 16) _mm512_storeu_si512(dst + 16, _mm512_permutex2var_epi16(lo, second, hi));
    }
  }
}

// BF16 source with rows contiguous (element (r, k) at src[k * ld + r]).
void pack_bf16_cols(const bf16_t* src, int64_t ld, int64_t r0, int rows, int tile, int64_t k0, int64_t kc,
                    uint32_t* out) {
  pack_cols_with(
      [&](int64_t k, int v, __mmask32 m) { return _mm512_maskz_loadu_epi16(m, src + (k0 + k) * ld + r0 + v); }, rows,
      tile, kc, out);
}

void pack_bf16_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                     float*) {
  const auto* src = static_cast<const bf16_t*>(op.data);
  auto* out = static_cast<uint32_t*>(panel);
  if (op.k_contiguous) {
    pack_bf16_rows(src, op.ld, r0, rows, tile, k0, kc, out);
  } else {
    pack_bf16_cols(src, op.ld, r0, rows, tile, k0, kc, out);
  }
}

// A block of panels from a source with rows contiguous (element (r, k) of source row k, column
// r): one pass over the source's lines, four source rows (two pairs) and 32 columns at a time, so
// that every 64-byte line is read once and every store fills a line. `load(k, c, mask)` gives the
// BF16 values of columns c .. c + 31 of source row k where `mask` is set, zeros elsewhere, and
// prefetches the same columns four rows on. Panel by panel, an 8-row A panel took 16 bytes of
// each of 256 lines 4 KiB apart, and the three panels sharing those lines came back for them after
// L1 had let them go: 2048 x 1024 x 1024 in that layout spent 13.6 % of its samples packing,
// against 3.6 % with K contiguous; this way 2.9 %.
template <typename LoadColumns>
void pack_cols_block_with(const LoadColumns& load, int rows, int tile, int64_t kc, std::byte* out,
                          int64_t panel_bytes) {
  auto panel = [&](int col) { return reinterpret_cast<uint32_t*>(out + col / tile * panel_bytes) + col % tile; };
  const __m512i first = interleave_first(), second = _mm512_add_epi16(first, _mm512_set1_epi16(16));
  const int64_t groups = (kc + 1) / 2;
  const int width = (rows + tile - 1) / tile * tile;  // the panels' columns, padding included
  for (int64_t g = 0; g < groups; g += 2) {
    const int64_t present = std::min<int64_t>(4, kc - 2 * g);  // source rows 2g .. (1 to 4)
    const bool two = g + 1 < groups;                           // pair g + 1 exists
    for (int c = 0; c < width; c += 32) {
      const int left = std::clamp(rows - c, 0, 32);
      const __mmask32 m = left == 32 ? ~__mmask32{0} : static_cast<__mmask32>((1u << left) - 1);
      __m512i x[4];
      for (int i = 0; i < 4; ++i) x[i] = i < present ? load(2 * g + i, c, m) : _mm512_setzero_si512();
      // v[h][q]: pair g + q of columns c + 16h .. c + 16h + 15, one word per column.
      const __m512i v[2][2] = {
          {_mm512_permutex2var_epi16(x[0], first, x[1]), _mm512_permutex2var_epi16(x[2], first, x[3])},
          {_mm512_permutex2var_epi16(x[0], second, x[1]), _mm512_permutex2var_epi16(x[2], second, x[3])}};
      for (int h = 0; h < 2 && c + 16 * h < width; ++h) {
        const int col = c + 16 * h;
        if (tile != 8) {  // a multiple of 16: the 16 columns lie in one panel, pairs g and g + 1 a row apart
          uint32_t* dst = panel(col) + g * tile;
          _mm512_storeu_si512(dst, v[h][0]);
          if (two) _mm512_storeu_si512(dst + tile, v[h][1]);
          continue;
        }
        // 8-row panels: columns col .. col + 7 in one, col + 8 .. col + 15 in the next; a panel's
        // pairs g and g + 1 are 8 words each, side by side.
        for (int half = 0; half < 2 && col + 8 * half < width; ++half) {
          uint32_t* dst = panel(col + 8 * half) + g * 8;
          if (two) {
            _mm512_storeu_si512(dst, half == 0 ? _mm512_shuffle_i64x2(v[h][0], v[h][1], 0x44)
                                               : _mm512_shuffle_i64x2(v[h][0], v[h][1], 0xEE));
          } else {
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst),
                                half == 0 ? _mm512_castsi512_si256(v[h][0]) : _mm512_extracti64x4_epi64(v[h][0], 1));
          }
        }
      }
    }
  }
}

// A block of panels, pack_bf16_panel's bytes: K contiguous, panel by panel; rows contiguous (both
// operands of the weight gradients' products), pack_cols_block_with.
void pack_bf16_block(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panels,
                     int64_t panel_bytes, float*, int64_t) {
  const auto* src = static_cast<const bf16_t*>(op.data);
  auto* out = static_cast<std::byte*>(panels);
  if (op.k_contiguous) {
    for (int r = 0; r < rows; r += tile)
      pack_bf16_rows(src, op.ld, r0 + r, std::min(tile, rows - r), tile, k0, kc,
                     reinterpret_cast<uint32_t*>(out + r / tile * panel_bytes));
    return;
  }
  pack_cols_block_with(
      [&](int64_t k, int c, __mmask32 m) {
        const bf16_t* line = src + (k0 + k) * op.ld + r0 + c;
        _mm_prefetch(reinterpret_cast<const char*>(line + 4 * op.ld), _MM_HINT_T0);
        return _mm512_maskz_loadu_epi16(m, line);
      },
      rows, tile, kc, out, panel_bytes);
}

// The first `valid` (at most 32) of the codes at src, decoded exactly to 32 BF16 words (zeros past
// them): the decoder's low half.
inline __m512i decode32(const avx512::E4m3Decoder& decoder, const uint8_t* src, __mmask64 valid) {
  __m512i lo, hi;
  decoder.decode64(_mm512_maskz_loadu_epi8(valid, src), &lo, &hi);
  return lo;
}

// FP8 codes, decoded exactly to BF16 as they are loaded and packed like a BF16 source (no
// scratch copy); scales [ceil(kc/128)][tile].
//   [rows, K] (K contiguous): as pack_bf16_rows; an odd kc's last pair is (code, 0).
//   [K, rows] (a 128x128-block weight as stored, for dX = dY W): as pack_bf16_cols.
// Each load decodes 32 codes (decode32).
void pack_fp8_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                    float* scales) {
  const avx512::E4m3Decoder decoder;
  const auto* codes = static_cast<const uint8_t*>(op.data);
  auto* out = static_cast<uint32_t*>(panel);
  if (op.k_contiguous) {
    const uint8_t* base = codes + r0 * op.ld + k0;
    pack_rows_with(
        [&](int row, int64_t g0, int) {
          const uint8_t* line = base + row * op.ld + 2 * g0;
          prefetch_next_panel(line, tile * op.ld);
          return decode32(decoder, line, avx512::first_bytes_mask(std::min<int64_t>(32, kc - 2 * g0)));
        },
        rows, tile, (kc + 1) / 2, out);
  } else {
    pack_cols_with(
        [&](int64_t k, int v, __mmask32 m) { return decode32(decoder, codes + (k0 + k) * op.ld + r0 + v, m); }, rows,
        tile, kc, out);
  }
  pack_fp8_scales(op, r0, rows, tile, k0, kc, scales);
}

// A block of pack_fp8_panel's panels and scales: with rows contiguous (the weight as stored, for
// dX = dY W), the codes of four source rows decoded 32 at a time and packed as pack_bf16_block
// does (panel by panel, each panel read 48 of a line's 64 codes and came back for the rest:
// gemm_nn_fp8 at a Qwen3-0.6B layer's shapes ran 0.88-0.93 of gemm_nn_bf16's rate).
void pack_fp8_block(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panels,
                    int64_t panel_bytes, float* scales, int64_t scales_stride) {
  auto* out = static_cast<std::byte*>(panels);
  if (op.k_contiguous) {
    for (int r = 0; r < rows; r += tile)
      pack_fp8_panel(op, r0 + r, std::min(tile, rows - r), tile, k0, kc, out + r / tile * panel_bytes,
                     scales + r / tile * scales_stride);
    return;
  }
  const avx512::E4m3Decoder decoder;
  const auto* codes = static_cast<const uint8_t*>(op.data);
  pack_cols_block_with(
      [&](int64_t k, int c, __mmask32 m) {
        const uint8_t* line = codes + (k0 + k) * op.ld + r0 + c;
        _mm_prefetch(reinterpret_cast<const char*>(line + 4 * op.ld), _MM_HINT_T0);
        return decode32(decoder, line, m);
      },
      rows, tile, kc, out, panel_bytes);
  for (int r = 0; r < rows; r += tile)
    pack_fp8_scales(op, r0 + r, std::min(tile, rows - r), tile, k0, kc, scales + r / tile * scales_stride);
}

void pack_f32_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel,
                    float*) {
  const auto* src = static_cast<const float*>(op.data);
  auto* out = static_cast<float*>(panel);  // [kc][tile]
  if (op.k_contiguous) {
    pack_words_rows(reinterpret_cast<const uint8_t*>(src + r0 * op.ld + k0), op.ld * 4, rows, tile, kc,
                    reinterpret_cast<uint32_t*>(out));
    return;
  }
  for (int64_t k = 0; k < kc; ++k) {
    const float* row = src + (k0 + k) * op.ld + r0;
    for (int v = 0; v * 16 < tile; ++v) {
      const int left = std::clamp(rows - 16 * v, 0, 16);
      const __m512 x = _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << left) - 1), row + 16 * v);
      if (tile - 16 * v >= 16) {
        _mm512_storeu_ps(out + k * tile + 16 * v, x);
      } else {
        _mm256_storeu_ps(out + k * tile + 16 * v, _mm512_castps512_ps256(x));
      }
    }
  }
}

// ---- micro-kernels ---------------------------------------------------------------------------

// acc[m][v] += pairs of A row m . pairs of B columns 16v..16v+15, for `pairs` pairs in order.
inline void dot_pairs(const uint32_t* a, const uint32_t* b, int64_t pairs, __m512 (&acc)[kMr][kNv]) {
  for (int64_t p = 0; p < pairs; ++p) {
    __m512bh bv[kNv];
#pragma GCC unroll 3
    for (int v = 0; v < kNv; ++v) bv[v] = (__m512bh)_mm512_loadu_si512(b + p * kNr + 16 * v);
#pragma GCC unroll 8
    for (int m = 0; m < kMr; ++m) {
      const __m512bh av = (__m512bh)_mm512_set1_epi32(static_cast<int>(a[p * kMr + m]));
#pragma GCC unroll 3
      for (int v = 0; v < kNv; ++v) acc[m][v] = _mm512_dpbf16_ps(acc[m][v], av, bv[v]);
    }
  }
}

// kRound: the tile is rounded to BF16 values in registers on its way to C (the last K block of a
// rounded product), the bits of rounding C afterwards without reloading what was just stored.
template <bool kRound>
inline __m512 finish(__m512 x) {
  if constexpr (kRound) return avx512::bf16_round16(x);
  return x;
}

template <bool kRound>
void kernel_bf16(int64_t kc, const void* a_panel, const void* b_panel, const float*, const float*, float* c,
                 int64_t ldc, bool load_c) {
  __m512 acc[kMr][kNv];
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) acc[m][v] = load_c ? _mm512_loadu_ps(c + m * ldc + 16 * v) : _mm512_setzero_ps();
  dot_pairs(static_cast<const uint32_t*>(a_panel), static_cast<const uint32_t*>(b_panel), (kc + 1) / 2, acc);
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) _mm512_storeu_ps(c + m * ldc + 16 * v, finish<kRound>(acc[m][v]));
}

template <bool kRound>  // as in kernel_bf16: the last slice's promotion is rounded
void kernel_fp8(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                int64_t ldc, bool load_c) {
  const auto* a = static_cast<const uint32_t*>(a_panel);
  const auto* b = static_cast<const uint32_t*>(b_panel);
  const int64_t pairs = (kc + 1) / 2;
  constexpr int64_t kSlicePairs = kQuantBlock / 2;
  for (int64_t s = 0; s * kSlicePairs < pairs; ++s) {
    __m512 slice[kMr][kNv];
    for (int m = 0; m < kMr; ++m)
      for (int v = 0; v < kNv; ++v) slice[m][v] = _mm512_setzero_ps();
    const int64_t p0 = s * kSlicePairs;
    dot_pairs(a + p0 * kMr, b + p0 * kNr, std::min(kSlicePairs, pairs - p0), slice);
    // Promotion: running = running + slice * (s_a * s_b), multiply then add as in the twin.
    const bool continued = load_c || s > 0;
    const bool last = (s + 1) * kSlicePairs >= pairs;
    for (int m = 0; m < kMr; ++m) {
      const __m512 scale_a = _mm512_set1_ps(sa[s * kMr + m]);
      for (int v = 0; v < kNv; ++v) {
        const __m512 scale = _mm512_mul_ps(scale_a, _mm512_loadu_ps(sb + s * kNr + 16 * v));
        float* cv = c + m * ldc + 16 * v;
        const __m512 running = continued ? _mm512_loadu_ps(cv) : _mm512_setzero_ps();
        const __m512 sum = _mm512_add_ps(running, _mm512_mul_ps(slice[m][v], scale));
        _mm512_storeu_ps(cv, last ? finish<kRound>(sum) : sum);
      }
    }
  }
}

void kernel_f32(int64_t kc, const void* a_panel, const void* b_panel, const float*, const float*, float* c, int64_t ldc,
                bool load_c) {
  const auto* a = static_cast<const float*>(a_panel);
  const auto* b = static_cast<const float*>(b_panel);
  __m512 acc[kMr][kNv];
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) acc[m][v] = load_c ? _mm512_loadu_ps(c + m * ldc + 16 * v) : _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    __m512 bv[kNv];
#pragma GCC unroll 3
    for (int v = 0; v < kNv; ++v) bv[v] = _mm512_loadu_ps(b + k * kNr + 16 * v);
#pragma GCC unroll 8
    for (int m = 0; m < kMr; ++m) {
      const __m512 av = _mm512_set1_ps(a[k * kMr + m]);
#pragma GCC unroll 3
      for (int v = 0; v < kNv; ++v) acc[m][v] = _mm512_fmadd_ps(av, bv[v], acc[m][v]);
    }
  }
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) _mm512_storeu_ps(c + m * ldc + 16 * v, acc[m][v]);
}

// kernel_adding for any of the kernels above: the product of one K block in a tile on the stack,
// then added to C a vector at a time (the driver's scalar loop did the same additions).
template <MicroKernelFn kKernel>
void kernel_adding(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                   int64_t ldc, bool) {
  alignas(64) float product[kMr * kNr];
  kKernel(kc, a_panel, b_panel, sa, sb, product, kNr, /*load_c=*/false);
  for (int m = 0; m < kMr; ++m)
    for (int v = 0; v < kNv; ++v) {
      float* cv = c + m * ldc + 16 * v;
      _mm512_storeu_ps(cv, _mm512_add_ps(_mm512_loadu_ps(cv), _mm512_load_ps(product + m * kNr + 16 * v)));
    }
}

GemmBackend make_backend(DType type) {
  GemmBackend be;
  be.mr = kMr;
  be.nr = kNr;
  // BF16 and FP8: kc 2048, mc 48, nc 1536, so the B panel (2048 x 48 x 2 = 192 KiB) and the A
  // block (48 x 2048 x 2 = 192 KiB) stream from L2 rather than sit in L1, and C is read and
  // written once per 2,048 of K (docs/kernels.md has the measurements). The sum over K is the same
  // whatever kc: the accumulators continue through C, which holds FP32 exactly.
  be.mc_block = 48;
  be.nc_block = 1536;
  switch (type) {
    case DType::kF32:
      be.name = "avx512-f32";
      be.k_group = 1;
      be.element_bytes = 4;
      be.kc_block = 128;  // B panel 128 x 48 x 4 = 24 KiB stays in L1
      be.mc_block = 192;
      be.pack_a = be.pack_b = pack_f32_panel;
      be.kernel = kernel_f32;
      be.kernel_adding = kernel_adding<kernel_f32>;
      break;
    case DType::kBF16:
      be.name = "avx512-bf16";
      be.k_group = 2;
      be.element_bytes = 2;
      be.kc_block = 2048;
      be.pack_a = be.pack_b = pack_bf16_panel;  // for the AMX back-end's packers
      be.pack_a_block = be.pack_b_block = pack_bf16_block;
      be.kernel = kernel_bf16<false>;
      be.kernel_rounding = kernel_bf16<true>;
      be.kernel_adding = kernel_adding<kernel_bf16<false>>;
      break;
    case DType::kE4M3:
      be.name = "avx512-fp8";
      be.k_group = 2;
      be.element_bytes = 2;
      be.blockwise = true;
      be.kc_block = 2048;  // a multiple of 128: slices never straddle K blocks
      be.pack_a = be.pack_b = pack_fp8_panel;
      be.pack_a_block = be.pack_b_block = pack_fp8_block;
      be.kernel = kernel_fp8<false>;
      be.kernel_rounding = kernel_fp8<true>;
      be.kernel_adding = kernel_adding<kernel_fp8<false>>;
      break;
    case DType::kI32:
    case DType::kU8: FP8RL_CHECK(false, "no AVX-512 GEMM for {} operands", dtype_name(type));
  }
  return be;
}

}  // namespace

const GemmBackend& gemm_backend_avx512(DType type) {
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

FP8RL_AVX512_END
