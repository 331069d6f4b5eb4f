// AVX-512 attention_group_kv over FP32, BF16 or E4M3 rows (attention_row.h), bit-identical to the
// scalar template:
//   score: lane l of one 16-wide accumulator per key sums q[i] * k[i] for i = l, l + 16, ... in
//          order (multiply, then add; lanes past D never added to), then the same reduction tree
//          (halves of 8, 4, 2, 1 lanes added pairwise); times score_scale. Keys go 16 at a time
//          through a transposing reduction that performs exactly those additions for all 16
//          at once, instead of one latency-bound horizontal sum per key.
//   softmax: scalar max, then the template's own attention_softmax (compiled for plain x86-64).
//   output: lane d sums p[j] * v_j[d] over j in order (multiply, then add), then * value_scale.
// Rows are widened (BF16) or decoded (E4M3) to exact FP32 in registers as they are loaded. The
// query heads of a group share the pass: a block of narrow key rows is widened once into a
// per-thread buffer and scored for each head; value rows are widened once per key and summed
// into two heads' accumulators at a time.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/attention_row.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see that header)

namespace fp8rl::detail {
namespace {

inline __mmask16 chunk_mask(int64_t D, int64_t c) {
  const int64_t left = D - 16 * c;
  return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
}

// Elements [16c, 16c + 16) of a row as exact FP32 (masked lanes read nothing and are zero).
template <KvElement E>
inline __m512 load_chunk(const void* row, int64_t c, __mmask16 m) {
  if constexpr (E == KvElement::kF32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + 16 * c);
  } else if constexpr (E == KvElement::kBF16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + 16 * c);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    // E4M3 magnitude bits placed at FP32 bits 20..26 read as 2^(e - 127) * (1 + m/8) (or, for
    // e = 0, the FP32 subnormal m * 2^-129); times 2^120 that is the E4M3 value exactly. The
    // NaN code (0x7F magnitude) becomes a NaN; the sign moves to bit 31.
    const __m512i code = _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(m, static_cast<const uint8_t*>(row) + 16 * c));
    const __m512i mag = _mm512_and_si512(code, _mm512_set1_epi32(0x7F));
    __m512 v = _mm512_mul_ps(_mm512_castsi512_ps(_mm512_slli_epi32(mag, 20)), _mm512_set1_ps(0x1.0p120f));
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7F)), _mm512_set1_ps(NAN));
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v),
                                               _mm512_slli_epi32(_mm512_and_si512(code, _mm512_set1_epi32(0x80)), 24)));
  }
}

// Elements [16 c0, 16 c0 + 64) of an E4M3 row as four exact FP32 vectors (codes past D read as
// zero): two table lookups for all 64 codes (the codec's decoder), then BF16 widened to FP32,
// where load_chunk spends about nine operations per 16 codes.
inline void decode64_f32(const uint8_t* row, int64_t c0, int64_t D, const avx512::E4m3Decoder& dec, __m512 out[4]) {
  const int64_t left = D - 16 * c0;
  const __mmask64 m = left >= 64 ? ~__mmask64{0} : (__mmask64{1} << left) - 1;
  __m512i lo, hi;
  dec.decode64(_mm512_maskz_loadu_epi8(m, row + 16 * c0), &lo, &hi);
  const __m256i h[4] = {_mm512_castsi512_si256(lo), _mm512_extracti64x4_epi64(lo, 1), _mm512_castsi512_si256(hi),
                        _mm512_extracti64x4_epi64(hi, 1)};
  for (int g = 0; g < 4; ++g) out[g] = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h[g]), 16));
}

// s[i] = tree(a[i]) for 16 accumulators: lanes[l] += lanes[l + w] for w = 8, 4, 2, 1, lane 0
// returned; the four steps pair the same lanes as reduce-one-at-a-time would.
inline __m512 reduce_tree16(const __m512* a) {
  __m512 c[8], d[4], g[2];
  for (int i = 0; i < 8; ++i)  // 8-lane halves: [a_2i | a_2i+1]
    c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0x44),
                         _mm512_shuffle_f32x4(a[2 * i], a[2 * i + 1], 0xEE));
  for (int i = 0; i < 4; ++i)  // 128-bit lane L: key 4i + L
    d[i] = _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0x88),
                         _mm512_shuffle_f32x4(c[2 * i], c[2 * i + 1], 0xDD));
  for (int i = 0; i < 2; ++i)  // lane L: elements 0,1 key 8i + L, elements 2,3 key 8i + 4 + L
    g[i] = _mm512_add_ps(_mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0x44), _mm512_shuffle_ps(d[2 * i], d[2 * i + 1], 0xEE));
  // Element 4L + e holds key 4e + L; the permutation (its own inverse) puts key i at element i.
  const __m512 s = _mm512_add_ps(_mm512_shuffle_ps(g[0], g[1], 0x88), _mm512_shuffle_ps(g[0], g[1], 0xDD));
  return _mm512_permutexvar_ps(_mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0), s);
}

// Scores of up to 16 consecutive rows (row i at rows + i * row_bytes) against q, reduced in the
// template's order and times `scale`: element i is row i's score (rows past n give junk).
template <KvElement E>
inline __m512 score_block(const uint8_t* rows, int64_t row_bytes, int64_t n, const float* q, int64_t D,
                          __m512 scale) {
  __m512 acc[16];
  for (int64_t i = 0; i < 16; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t c = 0; c * 16 < D; ++c) {
    const __mmask16 m = chunk_mask(D, c);
    const __m512 qc = _mm512_maskz_loadu_ps(m, q + 16 * c);
    for (int64_t i = 0; i < n; ++i)
      acc[i] = _mm512_mask_add_ps(acc[i], m, acc[i], _mm512_mul_ps(qc, load_chunk<E>(rows + i * row_bytes, c, m)));
  }
  return _mm512_mul_ps(reduce_tree16(acc), scale);
}

// out_h[16 c0 .. 16 (c0 + nc)) for H heads (nc <= 4 chunks): each value row is widened once
// and accumulated into every head's sums, lane by lane in position order.
template <KvElement E, int H>
void value_pass(float* out, int64_t out_stride, const float* probs, int64_t probs_stride, const AttentionRows* runs,
                int num_runs, int64_t row_bytes, int64_t D, int64_t c0, int64_t nc, float value_scale,
                const avx512::E4m3Decoder& dec) {
  __m512 acc[H][4];
  for (int h = 0; h < H; ++h)
    for (int c = 0; c < 4; ++c) acc[h][c] = _mm512_setzero_ps();
  int64_t j = 0;
  for (int s = 0; s < num_runs; ++s) {
    const auto* v = static_cast<const uint8_t*>(runs[s].v);
    for (int64_t i = 0; i < runs[s].rows; ++i, ++j) {
      __m512 p[H];
      for (int h = 0; h < H; ++h) p[h] = _mm512_set1_ps(probs[h * probs_stride + j]);
      __m512 wide[4];
      if constexpr (E == KvElement::kE4M3) decode64_f32(v + i * row_bytes, c0, D, dec, wide);
      for (int64_t c = 0; c < nc; ++c) {
        __m512 vc;
        if constexpr (E == KvElement::kE4M3)
          vc = wide[c];
        else
          vc = load_chunk<E>(v + i * row_bytes, c0 + c, chunk_mask(D, c0 + c));
        for (int h = 0; h < H; ++h) acc[h][c] = _mm512_add_ps(acc[h][c], _mm512_mul_ps(p[h], vc));
      }
    }
  }
  for (int h = 0; h < H; ++h)
    for (int64_t c = 0; c < nc; ++c) {
      __m512 o = acc[h][c];
      if (value_scale != 1.0f) o = _mm512_mul_ps(o, _mm512_set1_ps(value_scale));
      _mm512_mask_storeu_ps(out + h * out_stride + 16 * (c0 + c), chunk_mask(D, c0 + c), o);
    }
}

template <KvElement E>
void attention_group_typed(float* out, int64_t out_stride, float* probs, int64_t probs_stride, const float* q,
                           int64_t q_stride, int64_t heads, const AttentionRows* runs, int num_runs, int64_t len,
                           int64_t D, int64_t stride, float score_scale, float value_scale) {
  constexpr int64_t kBytes = E == KvElement::kF32 ? 4 : E == KvElement::kBF16 ? 2 : 1;
  const int64_t chunks = (D + 15) / 16, row_bytes = stride * kBytes;
  const __m512 scale = _mm512_set1_ps(score_scale);
  const avx512::E4m3Decoder dec;
  // With several heads, a block of narrow (BF16, E4M3) key rows is widened once into FP32 rows.
  const bool widen_once = E != KvElement::kF32 && heads > 1;
  thread_local std::vector<float> kbuf;  // grows once per thread, never zeroed again
  if (widen_once && kbuf.size() < static_cast<size_t>(16 * chunks * 16)) kbuf.resize(static_cast<size_t>(16 * chunks * 16));
  int64_t j = 0;
  for (int s = 0; s < num_runs; ++s) {
    const auto* k = static_cast<const uint8_t*>(runs[s].k);
    for (int64_t i0 = 0; i0 < runs[s].rows; i0 += 16) {
      const int64_t n = std::min<int64_t>(16, runs[s].rows - i0);
      const __mmask16 keys = static_cast<__mmask16>((1u << n) - 1);
      const uint8_t* block = k + i0 * row_bytes;
      if (widen_once) {
        for (int64_t i = 0; i < n; ++i)
          for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
            __m512 wide[4];
            if constexpr (E == KvElement::kE4M3) {
              decode64_f32(block + i * row_bytes, c0, D, dec, wide);
            } else {
              for (int64_t c = c0; c < std::min(chunks, c0 + 4); ++c)
                wide[c - c0] = load_chunk<E>(block + i * row_bytes, c, chunk_mask(D, c));
            }
            for (int64_t c = c0; c < std::min(chunks, c0 + 4); ++c)
              _mm512_storeu_ps(&kbuf[static_cast<size_t>((i * chunks + c) * 16)], wide[c - c0]);
          }
        const auto* wide = reinterpret_cast<const uint8_t*>(kbuf.data());
        for (int64_t h = 0; h < heads; ++h)
          _mm512_mask_storeu_ps(probs + h * probs_stride + j, keys,
                                score_block<KvElement::kF32>(wide, chunks * 64, n, q + h * q_stride, D, scale));
      } else {
        for (int64_t h = 0; h < heads; ++h)
          _mm512_mask_storeu_ps(probs + h * probs_stride + j, keys,
                                score_block<E>(block, row_bytes, n, q + h * q_stride, D, scale));
      }
      j += n;
    }
  }
  for (int64_t h = 0; h < heads; ++h) {
    float* p = probs + h * probs_stride;
    float max = -INFINITY;
    for (int64_t i = 0; i < len; ++i) max = std::max(max, p[i]);
    attention_softmax(p, len, max);
  }
  for (int64_t h = 0; h < heads; h += 2)
    for (int64_t c0 = 0; c0 < chunks; c0 += 4) {
      const int64_t nc = std::min<int64_t>(4, chunks - c0);
      float* o = out + h * out_stride;
      const float* p = probs + h * probs_stride;
      if (heads - h >= 2)
        value_pass<E, 2>(o, out_stride, p, probs_stride, runs, num_runs, row_bytes, D, c0, nc, value_scale, dec);
      else
        value_pass<E, 1>(o, out_stride, p, probs_stride, runs, num_runs, row_bytes, D, c0, nc, value_scale, dec);
    }
}

}  // namespace

void attention_group_kv_avx512(float* out, int64_t out_stride, float* probs, int64_t probs_stride, const float* q,
                               int64_t q_stride, int64_t heads, const AttentionRows* runs, int num_runs, int64_t len,
                               int64_t D, int64_t stride, KvElement element, float score_scale, float value_scale) {
  switch (element) {
    case KvElement::kF32:
      return attention_group_typed<KvElement::kF32>(out, out_stride, probs, probs_stride, q, q_stride, heads, runs,
                                                    num_runs, len, D, stride, score_scale, value_scale);
    case KvElement::kBF16:
      return attention_group_typed<KvElement::kBF16>(out, out_stride, probs, probs_stride, q, q_stride, heads, runs,
                                                     num_runs, len, D, stride, score_scale, value_scale);
    case KvElement::kE4M3:
      return attention_group_typed<KvElement::kE4M3>(out, out_stride, probs, probs_stride, q, q_stride, heads, runs,
                                                     num_runs, len, D, stride, score_scale, value_scale);
  }
}

}  // namespace fp8rl::detail

FP8RL_AVX512_END
