// AVX-512 back-end of the decode GEMV (layouts in gemv.h).
//
// A group of S strips (16 rows of W each) is processed together so that S x M independent
// vdpbf16ps chains hide the instruction latency when M is small; each output element still gets
// the same instruction sequence as in the GEMM micro-kernel (gemm_avx512.cc): one accumulator
// starting at zero, vdpbf16ps over the pairs of K in order, and for FP8 weights one such chain per
// 128-slice followed by running = running + slice * (s_x * s_w). That is what makes the rows
// bit-identical to the GEMM's.
#include <algorithm>
#include <climits>

#include "kernels/gemv/gemv_kernels.h"
#include "numerics/codec.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"

namespace fp8rl::gemv_detail {
namespace {

// E4M3 -> BF16 of one 64-byte chunk stored in the decode's lane order (gemv.h); *pair0 and
// *pair1 are the two vdpbf16ps operands of the chunk.
struct ChunkDecoder {
  avx512::E4m3Decoder decoder;
  inline void decode(__m512i c, __m512bh* pair0, __m512bh* pair1) const {
    __m512i lo, hi;
    decoder.decode64_lane_order(c, &lo, &hi);
    *pair0 = (__m512bh)lo;
    *pair1 = (__m512bh)hi;
  }
};

inline __m512bh broadcast_pair(const uint32_t* pairs, int64_t index) {
  return (__m512bh)_mm512_set1_epi32(static_cast<int>(pairs[index]));
}

// Writes the 16 columns of strip `s` of row m (only those below N).
inline void store_strip(const GemvDst& dst, int m, int64_t n0, int64_t N, __m512 v) {
  const int64_t left = std::min<int64_t>(16, N - n0);
  if (dst.round_bf16) v = avx512::bf16_round16(v);
  _mm512_mask_storeu_ps(dst.y + m * dst.ldy + n0, static_cast<__mmask16>((1u << left) - 1), v);
}

// BF16 strips are requested this many 64-byte lines ahead from 5 rows on (groups of one or two
// strips: each line feeds 5-16 vdpbf16ps), where the hardware prefetcher alone left the 151,936 x
// 1,024 LM head at about half the read bandwidth (docs/generation.md). Groups of four or eight
// strips (1 to 4 rows) read that many streams at once, which it follows; the hints cost them more
// than they bring.
constexpr int64_t kBf16PrefetchLines = 64;
constexpr int kBf16PrefetchFromRows = 5;

template <int M, int S>
void bf16_group(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s) {
  const int64_t pairs = (W.cols + 1) / 2, strip_bytes = W.strip_bytes();
  const uint8_t* w = W.data.data() + s * strip_bytes;
  const uint32_t* xp = x.pairs.data();
  __m512 acc[S][M];
  for (int i = 0; i < S; ++i)
    for (int m = 0; m < M; ++m) acc[i][m] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
#pragma GCC unroll 16
    for (int i = 0; i < S; ++i) {
      if constexpr (M >= kBf16PrefetchFromRows)
        _mm_prefetch(reinterpret_cast<const char*>(w + i * strip_bytes + (p + kBf16PrefetchLines) * 64), _MM_HINT_T0);
      const __m512bh b = (__m512bh)_mm512_load_si512(w + i * strip_bytes + p * 64);
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) acc[i][m] = _mm512_dpbf16_ps(acc[i][m], broadcast_pair(xp, p * M + m), b);
    }
  }
  for (int i = 0; i < S; ++i)
    for (int m = 0; m < M; ++m) store_strip(dst, m, (s + i) * kGemvStrip, W.rows, acc[i][m]);
}

// FP8 codes are requested this many 64-byte lines ahead of their decode: the decode keeps the
// core busy, and without the hint its loads wait on memory.
constexpr int64_t kPrefetchLines = 32;

template <int M, int S>
void fp8_group(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s,
               const ChunkDecoder& dec) {
  const int64_t K = W.cols, pairs = (K + 1) / 2, strip_bytes = W.strip_bytes();
  const int64_t slices = (K + kQuantBlock - 1) / kQuantBlock;
  const uint8_t* w = W.data.data() + s * strip_bytes;
  const uint32_t* xp = x.pairs.data();
  __m512 running[S][M];
  for (int i = 0; i < S; ++i)
    for (int m = 0; m < M; ++m) running[i][m] = _mm512_setzero_ps();
  for (int64_t j = 0; j < slices; ++j) {
    __m512 acc[S][M];
    for (int i = 0; i < S; ++i)
      for (int m = 0; m < M; ++m) acc[i][m] = _mm512_setzero_ps();
    const int64_t p_begin = j * (kQuantBlock / 2), p_end = std::min(pairs, p_begin + kQuantBlock / 2);
    int64_t p = p_begin;
    for (; p + 2 <= p_end; p += 2) {
#pragma GCC unroll 16
      for (int i = 0; i < S; ++i) {
        // The line kPrefetchLines ahead is requested now (prefetches never fault past the end).
        _mm_prefetch(reinterpret_cast<const char*>(w + i * strip_bytes + (p / 2 + kPrefetchLines) * 64), _MM_HINT_T0);
        __m512bh b0, b1;
        dec.decode(_mm512_load_si512(w + i * strip_bytes + (p / 2) * 64), &b0, &b1);
#pragma GCC unroll 16
        for (int m = 0; m < M; ++m) {
          acc[i][m] = _mm512_dpbf16_ps(acc[i][m], broadcast_pair(xp, p * M + m), b0);
          acc[i][m] = _mm512_dpbf16_ps(acc[i][m], broadcast_pair(xp, (p + 1) * M + m), b1);
        }
      }
    }
    if (p < p_end) {  // K's last pair is alone in its chunk: use only its first half
      for (int i = 0; i < S; ++i) {
        __m512bh b0, b1;
        dec.decode(_mm512_load_si512(w + i * strip_bytes + (p / 2) * 64), &b0, &b1);
        for (int m = 0; m < M; ++m) acc[i][m] = _mm512_dpbf16_ps(acc[i][m], broadcast_pair(xp, p * M + m), b0);
      }
    }
    for (int i = 0; i < S; ++i) {
      const int64_t block_row = (s + i) * kGemvStrip / kQuantBlock;
      const float sw = W.scales[static_cast<size_t>(block_row * slices + j)];
      for (int m = 0; m < M; ++m) {
        const __m512 scale = _mm512_set1_ps(x.scales[static_cast<size_t>(m * slices + j)] * sw);
        running[i][m] = _mm512_add_ps(running[i][m], _mm512_mul_ps(acc[i][m], scale));
      }
    }
  }
  for (int i = 0; i < S; ++i)
    for (int m = 0; m < M; ++m) store_strip(dst, m, (s + i) * kGemvStrip, W.rows, running[i][m]);
}

// Strips per group: enough independent chains (S x M >= 8) for small M, within the registers.
template <int M>
constexpr int group_strips() {
  return M == 1 ? 8 : M == 2 ? 4 : M <= 4 ? 4 : M <= 8 ? 2 : 1;
}

template <int M>
void strips_for_rows(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                     int64_t s1) {
  constexpr int S = group_strips<M>();
  int64_t s = s0;
  if (W.type == DType::kBF16) {
    for (; s + S <= s1; s += S) bf16_group<M, S>(W, x, dst, s);
    for (; s < s1; ++s) bf16_group<M, 1>(W, x, dst, s);
  } else {
    const ChunkDecoder dec;
    for (; s + S <= s1; s += S) fp8_group<M, S>(W, x, dst, s, dec);
    for (; s < s1; ++s) fp8_group<M, 1>(W, x, dst, s, dec);
  }
}

template <int... Ms>
void dispatch_rows(std::integer_sequence<int, Ms...>, int64_t M, const PackedGemvWeights& W,
                   const PackedActivations& x, const GemvDst& dst, int64_t s0, int64_t s1) {
  ((M == Ms + 1 ? strips_for_rows<Ms + 1>(W, x, dst, s0, s1) : void()), ...);
}

}  // namespace

void gemv_strips_avx512(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                        int64_t s1) {
  dispatch_rows(std::make_integer_sequence<int, kGemvMaxRows>{}, x.M, W, x, dst, s0, s1);
}

// ---- packing ---------------------------------------------------------------------------------

void pack_fp8_strips_avx512(const uint8_t* codes, int64_t rows, int64_t K, int64_t ld, uint8_t* out) {
  if (15 * ld > INT_MAX) return pack_fp8_strips_portable(codes, rows, K, ld, out);
  const int64_t chunks = (K + 3) / 4, full = K / 4;
  // One gather fetches 4 codes (k = 4c..4c+3) of each of the 16 rows: byte 4n + t. One vpermb
  // moves byte 4n + 2 * pair + k to its place in the stored chunk.
  alignas(64) uint8_t index[64];
  for (int i = 0; i < 64; ++i) index[fp8_chunk_position(i)] = static_cast<uint8_t>(4 * ((i % 32) / 2) + 2 * (i / 32) + i % 2);
  const __m512i to_chunk = _mm512_load_si512(index);
  const __m512i row = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i offsets = _mm512_mullo_epi32(row, _mm512_set1_epi32(static_cast<int>(ld)));
  for (int64_t s = 0; s * kGemvStrip < rows; ++s) {
    const __mmask16 valid = _mm512_cmplt_epi32_mask(row, _mm512_set1_epi32(static_cast<int>(rows - s * kGemvStrip)));
    const uint8_t* base = codes + s * kGemvStrip * ld;
    uint8_t* strip = out + s * chunks * 64;
    for (int64_t c = 0; c < full; ++c) {
      const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, offsets, base + 4 * c, 1);
      _mm512_store_si512(strip + c * 64, _mm512_permutexvar_epi8(to_chunk, g));
    }
    if (full < chunks) {  // K % 4 != 0: the last chunk element by element
      for (int i = 0; i < 64; ++i) {
        const int64_t n = s * kGemvStrip + (i % 32) / 2, k = 4 * full + 2 * (i / 32) + i % 2;
        strip[full * 64 + fp8_chunk_position(i)] = n < rows && k < K ? codes[n * ld + k] : 0;
      }
    }
  }
}

void pack_bf16_strips_avx512(const bf16_t* w, int64_t rows, int64_t K, int64_t ld, uint8_t* out) {
  if (15 * ld * 2 > INT_MAX) return pack_bf16_strips_portable(w, rows, K, ld, out);
  const int64_t pairs = (K + 1) / 2, full = K / 2;
  const __m512i row = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i offsets = _mm512_mullo_epi32(row, _mm512_set1_epi32(static_cast<int>(ld * 2)));
  for (int64_t s = 0; s * kGemvStrip < rows; ++s) {
    const __mmask16 valid = _mm512_cmplt_epi32_mask(row, _mm512_set1_epi32(static_cast<int>(rows - s * kGemvStrip)));
    const auto* base = reinterpret_cast<const uint8_t*>(w + s * kGemvStrip * ld);
    uint8_t* strip = out + s * pairs * 64;
    for (int64_t p = 0; p < full; ++p)
      _mm512_store_si512(strip + p * 64, _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), valid, offsets, base + 4 * p, 1));
    if (full < pairs) {  // K odd: the last pair is (w[n][K-1], 0)
      auto* last = reinterpret_cast<bf16_t*>(strip + full * 64);
      for (int r = 0; r < kGemvStrip; ++r) {
        const int64_t n = s * kGemvStrip + r;
        last[2 * r] = n < rows ? w[n * ld + K - 1] : bf16_t{0};
        last[2 * r + 1] = 0;
      }
    }
  }
}

}  // namespace fp8rl::gemv_detail

FP8RL_AVX512_END
