// AVX2 back-end of the decode GEMV (layouts in gemv.h): AVX2 + FMA, 256-bit FP32 lanes, 16 ymm
// registers. The packed weights are the shared layout of every level; only the reading differs.
//
// Bits: every output element is the portable back-end's (gemv_portable.cc), hence the portable
// and AVX2 GEMMs' rows. Each element is one FP32 chain from zero over k in index order, one term
// per k (the K tail adds no padding term, as in the portable loop), and for FP8 weights
// one chain per 128-slice followed by running = running + slice * (s_x * s_w) (multiply, then add,
// the scale product first, exactly as the portable code, which is compiled without contraction).
// A term is one vfmadd: a BF16 x BF16 or E4M3 x BF16 product has at most 8 + 8 significant bits,
// so it is exact in FP32 and the FMA's single rounding equals the portable `acc + x * w` (as long
// as the product is not below FP32's normal range, |x * w| >= 2^-126 or 0: always true for
// E4M3 x E4M3 terms, and for BF16 operands unless values near 2^-60 meet; the AVX2 GEMM relies
// on the same argument).
// The vector lanes run across 8 rows of W (half a strip), never across k within one output.
//
// Work unit: half a strip (8 rows, 32 bytes of every 64-byte pair or chunk). A group of U units
// (U from the register budget) shares the loop over K so that U x M independent chains cover the
// FMA latency; units of the same strip read the two halves of the same cache lines.
#include <algorithm>
#include <utility>
#include <vector>

#include "kernels/gemv/gemv_kernels.h"
#include "numerics/simd_target.h"

namespace fp8rl::gemv_detail {
namespace {
// Per-thread scratch for the widened activations; defined before the AVX2 region, so that
// std::vector's code (shared with the portable callers) is not compiled for AVX2 here.
float* activation_scratch(size_t n) {
  thread_local std::vector<float> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}
}  // namespace
}  // namespace fp8rl::gemv_detail

FP8RL_AVX2_BEGIN
#include "numerics/avx2_codec_inl.h"

namespace fp8rl::gemv_detail {
namespace {

// The activations as FP32 (exact: a BF16 value widened), xf[k * stride + m], k < 2 ceil(K/2),
// so that every term's x is one vbroadcastss (a load, no ALU work). stride >= M is rounded up so
// that a pair of x.pairs ([p][M] words) widens with whole-vector loads and stores (the lanes past
// M hold junk that no kernel reads). Rebuilt per call of gemv_strips_avx2 (K x M values against
// the 128 x K x M terms of a task: about 1 %).
int64_t activation_stride(int64_t M) { return M == 1 ? 1 : M <= 4 ? 4 : M <= 8 ? 8 : 16; }

void widen_activations(const PackedActivations& x, int64_t pairs, float* xf) {
  const int64_t M = x.M, stride = activation_stride(M), words = pairs * M;
  const uint32_t* w = x.pairs.data();
  if (M == 1) {  // the words are x[0..2 pairs) as BF16 in order
    const auto* h = reinterpret_cast<const uint16_t*>(w);
    int64_t k = 0;
    for (; k + 8 <= 2 * pairs; k += 8)
      _mm256_storeu_ps(xf + k, avx2::bf16_decode8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + k))));
    for (; k < 2 * pairs; ++k) xf[k] = _mm_cvtss_f32(_mm_castsi128_ps(_mm_cvtsi32_si128(static_cast<int>(h[k]) << 16)));
    return;
  }
  // Word (x[2p], x[2p+1]): even value = word << 16, odd value = word & 0xFFFF0000.
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  for (int64_t p = 0; p < pairs; ++p) {
    const uint32_t* src = w + p * M;
    float* even = xf + 2 * p * stride;
    float* odd = even + stride;
    if (p * M + stride <= words) {
      if (stride == 4) {
        const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src));
        _mm_storeu_ps(even, _mm_castsi128_ps(_mm_slli_epi32(v, 16)));
        _mm_storeu_ps(odd, _mm_castsi128_ps(_mm_and_si128(v, _mm256_castsi256_si128(hi))));
      } else {
        for (int64_t m = 0; m < stride; m += 8) {
          const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + m));
          _mm256_storeu_ps(even + m, _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)));
          _mm256_storeu_ps(odd + m, _mm256_castsi256_ps(_mm256_and_si256(v, hi)));
        }
      }
    } else {  // the last pairs: a whole vector would read past x.pairs
      for (int64_t m = 0; m < M; ++m) {
        const __m128i v = _mm_cvtsi32_si128(static_cast<int>(src[m]));
        even[m] = _mm_cvtss_f32(_mm_castsi128_ps(_mm_slli_epi32(v, 16)));
        odd[m] = _mm_cvtss_f32(_mm_castsi128_ps(_mm_and_si128(v, _mm256_castsi256_si128(hi))));
      }
    }
  }
}

// Writes the 8 outputs of a unit for sequence m (only the columns below N).
inline void store_unit(const GemvDst& dst, int m, int64_t n0, int64_t N, __m256 v) {
  const int64_t left = N - n0;
  if (left <= 0) return;  // the padding half of the last strip
  if (dst.round_bf16) v = avx2::bf16_round8(v);
  float* y = dst.y + m * dst.ldy + n0;
  if (left >= 8) {
    _mm256_storeu_ps(y, v);
  } else {
    _mm256_maskstore_ps(y, avx2::first_lanes_mask(left), v);
  }
}

// Address of unit h (half-strip h: strip h / 2, rows 8 (h % 2) ..) in pair / chunk 0.
inline const uint8_t* unit_base(const PackedGemvWeights& W, int64_t h) {
  return W.data.data() + (h / 2) * W.strip_bytes() + (h % 2) * 32;
}

// Lines (64 bytes: one BF16 pair, one FP8 chunk) requested ahead in each unit's stream.
constexpr int64_t kPrefetchLines = 24;

// BF16 weights. A 32-byte load of pair p of unit u holds 8 rows' dwords (w[r][2p], w[r][2p+1]):
// w[r][2p] as FP32 = dword << 16, w[r][2p+1] = dword & 0xFFFF0000 (exact widenings).
template <int M, int U>
void bf16_units(const PackedGemvWeights& W, const float* xf, const GemvDst& dst, int64_t h) {
  constexpr int64_t stride = M == 1 ? 1 : M <= 4 ? 4 : M <= 8 ? 8 : 16;
  const int64_t K = W.cols, full = K / 2;
  const uint8_t* w[U];
  for (int u = 0; u < U; ++u) w[u] = unit_base(W, h + u);
  const __m256i hi = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
  __m256 acc[U][M];
  for (int u = 0; u < U; ++u)
    for (int m = 0; m < M; ++m) acc[u][m] = _mm256_setzero_ps();
  auto term = [&](const __m256(&wk)[U], const float* xk) {
#pragma GCC unroll 16
    for (int m = 0; m < M; ++m) {
      const __m256 xv = _mm256_broadcast_ss(xk + m);
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) acc[u][m] = _mm256_fmadd_ps(wk[u], xv, acc[u][m]);
    }
  };
  for (int64_t p = 0; p < full; ++p) {
    __m256 we[U], wo[U];
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u) {
      _mm_prefetch(reinterpret_cast<const char*>(w[u] + (p + kPrefetchLines) * 64), _MM_HINT_T0);
      we[u] = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(w[u] + p * 64)), 16));
    }
    term(we, xf + 2 * p * stride);  // k = 2p before k = 2p + 1: the chain's order
#pragma GCC unroll 8
    for (int u = 0; u < U; ++u)
      wo[u] =
          _mm256_castsi256_ps(_mm256_and_si256(_mm256_load_si256(reinterpret_cast<const __m256i*>(w[u] + p * 64)), hi));
    term(wo, xf + (2 * p + 1) * stride);
  }
  if (full * 2 < K) {  // K odd: the last pair's k = K - 1 alone
    __m256 we[U];
    for (int u = 0; u < U; ++u)
      we[u] = _mm256_castsi256_ps(
          _mm256_slli_epi32(_mm256_load_si256(reinterpret_cast<const __m256i*>(w[u] + full * 64)), 16));
    term(we, xf + 2 * full * stride);
  }
  for (int u = 0; u < U; ++u)
    for (int m = 0; m < M; ++m) store_unit(dst, m, (h + u) * 8, W.rows, acc[u][m]);
}

// E4M3 -> FP32 of a unit's 32 bytes of a chunk. Byte 16 l + 8 pair + 2 (r % 4) + k holds row
// 4 l + r % 4 (l = 0, 1: lanes of the ymm), k-th element of the pair (gemv.h's lane order
// restricted to one half: fp8_chunk_position). So per 128-bit lane, unpacking the bytes with
// themselves (lo: pair 0, hi: pair 1) gives one dword per row, in row order, holding
// (c_k0, c_k0, c_k1, c_k1). vpsraw 4 turns each word c:c into s s s s s m6..m0 junk4: sign at bit
// 15, magnitude at bits 4..10; masked with 0x87F0 and moved to the dword's high half that is the
// FP32 pattern sign | magnitude << 20 of avx2::e4m3_decode8, and the same exact multiply by
// 2^120 gives the E4M3 value (normal and subnormal codes, +-0). The NaN codes (magnitude 0x7F)
// would come out as +-480: a slice holding one is summed again with decode_exact.
struct Fp8Decode {
  __m256i mask, all_ones, top_bit;
  __m256 rebias;
  // An explicit constructor: an implicit one would not be compiled for the AVX2 target.
  Fp8Decode()
      : mask(_mm256_set1_epi32(static_cast<int>(0x87F00000u))),
        all_ones(_mm256_set1_epi32(-1)),
        top_bit(_mm256_set1_epi8(static_cast<char>(0x80))),
        rebias(_mm256_castsi256_ps(_mm256_set1_epi32(0x7B800000))) {}  // 2^120

  // The two elements of one pair from the bytes unpacked with themselves.
  inline void pair(__m256i twice, __m256* k0, __m256* k1) const {
    const __m256i d = _mm256_srai_epi16(twice, 4);
    *k0 = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(d, 16), mask)), rebias);
    *k1 = _mm256_mul_ps(_mm256_castsi256_ps(_mm256_and_si256(d, mask)), rebias);
  }
  // Any codes, NaN included: avx2::e4m3_decode8 on the gathered bytes; wk[2 pair + k].
  static void decode_exact(const uint8_t* half, __m256* wk) {
    for (int i = 0; i < 4; ++i) {
      alignas(16) uint8_t codes[16] = {};
      for (int r = 0; r < 8; ++r) codes[r] = half[16 * (r / 4) + 8 * (i / 2) + 2 * (r % 4) + i % 2];
      wk[i] = avx2::e4m3_decode8(_mm_load_si128(reinterpret_cast<const __m128i*>(codes)));
    }
  }
};

// FP8 weights: per 128-slice, per unit and sequence, one chain from zero over the chunks; then
// running = running + slice * (s_x * s_w), the running values kept in memory (updated once per
// slice) to leave the registers to the chains.
template <int M, int U>
void fp8_units(const PackedGemvWeights& W, const PackedActivations& x, const float* xf, const GemvDst& dst, int64_t h,
               const Fp8Decode& dec) {
  constexpr int64_t stride = M == 1 ? 1 : M <= 4 ? 4 : M <= 8 ? 8 : 16;
  const int64_t K = W.cols, chunks = (K + 3) / 4, full = K / 4, slices = (K + kQuantBlock - 1) / kQuantBlock;
  constexpr int64_t slice_chunks = kQuantBlock / 4;
  const uint8_t* w[U];
  for (int u = 0; u < U; ++u) w[u] = unit_base(W, h + u);
  alignas(32) float running[U][M][8] = {};
  for (int64_t j = 0; j < slices; ++j) {
    __m256 acc[U][M];
    for (int u = 0; u < U; ++u)
      for (int m = 0; m < M; ++m) acc[u][m] = _mm256_setzero_ps();
    // term(u, wk, k): acc[u][m] += wk * x[m][k] for every m.
    auto term = [&](int u, __m256 wk, int64_t k) {
#pragma GCC unroll 16
      for (int m = 0; m < M; ++m) acc[u][m] = _mm256_fmadd_ps(wk, _mm256_broadcast_ss(xf + k * stride + m), acc[u][m]);
    };
    const int64_t c_begin = j * slice_chunks, c_end = std::min(chunks, c_begin + slice_chunks);
    const int64_t c_full = std::min(c_end, full);
    // The fast decode, with every code's byte OR 0x80 folded into `seen` by unsigned max: a NaN
    // code (0x7F or 0xFF) makes a 0xFF byte there. Checked once per slice; a slice that held one
    // is summed again from zero with the exact decode (same chain, same order).
    __m256i seen = _mm256_setzero_si256();
    for (int64_t c = c_begin; c < c_full; ++c) {
#pragma GCC unroll 8
      for (int u = 0; u < U; ++u) {
        const uint8_t* half = w[u] + c * 64;
        _mm_prefetch(reinterpret_cast<const char*>(half + kPrefetchLines * 64), _MM_HINT_T0);
        const __m256i v = _mm256_load_si256(reinterpret_cast<const __m256i*>(half));
        seen = _mm256_max_epu8(seen, _mm256_or_si256(v, dec.top_bit));
        __m256 k0, k1;
        dec.pair(_mm256_unpacklo_epi8(v, v), &k0, &k1);  // k = 4c, 4c + 1
        term(u, k0, 4 * c);
        term(u, k1, 4 * c + 1);
        dec.pair(_mm256_unpackhi_epi8(v, v), &k0, &k1);  // k = 4c + 2, 4c + 3
        term(u, k0, 4 * c + 2);
        term(u, k1, 4 * c + 3);
      }
    }
    if (__builtin_expect(!_mm256_testz_si256(_mm256_cmpeq_epi8(seen, dec.all_ones), dec.all_ones), 0)) {
      for (int u = 0; u < U; ++u)
        for (int m = 0; m < M; ++m) acc[u][m] = _mm256_setzero_ps();
      for (int64_t c = c_begin; c < c_full; ++c)
        for (int u = 0; u < U; ++u) {
          __m256 wk[4];
          Fp8Decode::decode_exact(w[u] + c * 64, wk);
          for (int i = 0; i < 4; ++i) term(u, wk[i], 4 * c + i);
        }
    }
    if (c_full < c_end) {  // K % 4 != 0: the last chunk's K - 4 full terms only
      for (int u = 0; u < U; ++u) {
        __m256 wk[4];
        Fp8Decode::decode_exact(w[u] + full * 64, wk);
        for (int i = 0; 4 * full + i < K; ++i) term(u, wk[i], 4 * full + i);
      }
    }
    for (int u = 0; u < U; ++u) {
      const float sw = W.scales[static_cast<size_t>(((h + u) * 8 / kQuantBlock) * slices + j)];
      for (int m = 0; m < M; ++m) {
        const __m256 scale = _mm256_set1_ps(x.scales[static_cast<size_t>(m * slices + j)] * sw);
        _mm256_store_ps(running[u][m], _mm256_add_ps(_mm256_load_ps(running[u][m]), _mm256_mul_ps(acc[u][m], scale)));
      }
    }
  }
  for (int u = 0; u < U; ++u)
    for (int m = 0; m < M; ++m) store_unit(dst, m, (h + u) * 8, W.rows, _mm256_load_ps(running[u][m]));
}

// Units per group, from the 16 ymm registers: U x M chains, plus the weight vectors (BF16: U of
// them live at a time; FP8: the decode's 4), one broadcast x and the constants. Powers of two, so
// that a task's 16 units split evenly.
template <int M>
constexpr int bf16_units_per_group() {
  return M == 1 ? 8 : M == 2 ? 4 : M <= 5 ? 2 : 1;
}
template <int M>
constexpr int fp8_units_per_group() {
  return M <= 2 ? 4 : M <= 4 ? 2 : 1;
}

// Groups of U units over [h, h1), the remainder in groups of U / 2, U / 4, ...
template <int M, int U>
void run_groups(const PackedGemvWeights& W, const PackedActivations& x, const float* xf, const GemvDst& dst, int64_t h,
                int64_t h1, const Fp8Decode& dec) {
  for (; h + U <= h1; h += U) {
    if (W.type == DType::kBF16) {
      bf16_units<M, U>(W, xf, dst, h);
    } else {
      fp8_units<M, U>(W, x, xf, dst, h, dec);
    }
  }
  if constexpr (U > 1) run_groups<M, U / 2>(W, x, xf, dst, h, h1, dec);
}

template <int M>
void units_for_rows(const PackedGemvWeights& W, const PackedActivations& x, const float* xf, const GemvDst& dst,
                    int64_t h0, int64_t h1) {
  const Fp8Decode dec;
  if (W.type == DType::kBF16) {
    run_groups<M, bf16_units_per_group<M>()>(W, x, xf, dst, h0, h1, dec);
  } else {
    run_groups<M, fp8_units_per_group<M>()>(W, x, xf, dst, h0, h1, dec);
  }
}

template <int... Ms>
void dispatch_rows(std::integer_sequence<int, Ms...>, int64_t M, const PackedGemvWeights& W, const PackedActivations& x,
                   const float* xf, const GemvDst& dst, int64_t h0, int64_t h1) {
  ((M == Ms + 1 ? units_for_rows<Ms + 1>(W, x, xf, dst, h0, h1) : void()), ...);
}

}  // namespace

void gemv_strips_avx2(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                      int64_t s1) {
  const int64_t pairs = (W.cols + 1) / 2;
  float* xf = activation_scratch(static_cast<size_t>(2 * pairs * activation_stride(x.M)));
  widen_activations(x, pairs, xf);
  // Units past the last row (the zero half of a last strip with N % 16 <= 8) are skipped.
  const int64_t h1 = std::min(2 * s1, (W.rows + 7) / 8);
  dispatch_rows(std::make_integer_sequence<int, kGemvMaxRows>{}, x.M, W, x, xf, dst, 2 * s0, h1);
}

}  // namespace fp8rl::gemv_detail

FP8RL_AVX2_END
