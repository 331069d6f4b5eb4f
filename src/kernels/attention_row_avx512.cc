// AVX-512 attention_row over FP32 rows (attention_row.h), bit-identical to the scalar template:
//   score: lane l of one 16-wide accumulator sums q[i] * k[i] for i = l, l + 16, ... in order
//          (multiply, then add; lanes past D never added to), then the same reduction tree
//          (halves of 8, 4, 2, 1 lanes added pairwise); times score_scale.
//   softmax: scalar max, then the template's own attention_softmax (compiled for plain x86-64).
//   output: lane d sums p[j] * v_j[d] over j in order (multiply, then add), then * value_scale.
#include <algorithm>
#include <cmath>

#include "kernels/attention_row.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN

namespace fp8rl::detail {
namespace {

// lanes[l] += lanes[l + w] for w = 8, 4, 2, 1; returns lane 0.
inline float reduce_tree(__m512 v) {
  const __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1)));
}

constexpr int64_t kOutChunks = 8;  // output accumulators held in registers (128 floats of D)

}  // namespace

void attention_row_f32_avx512(float* out, float* probs, const float* q, const AttentionRows* segments,
                              int num_segments, int64_t len, int64_t D, int64_t stride, float score_scale,
                              float value_scale) {
  const int64_t chunks = (D + 15) / 16;
  auto mask_of = [&](int64_t c) -> __mmask16 {
    const int64_t left = D - 16 * c;
    return left >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << left) - 1);
  };
  float max = -INFINITY;
  int64_t j = 0;
  for (int s = 0; s < num_segments; ++s)
    for (int64_t i = 0; i < segments[s].rows; ++i, ++j) {
      const float* k = segments[s].k + i * stride;
      __m512 acc = _mm512_setzero_ps();
      for (int64_t c = 0; c < chunks; ++c) {
        const __mmask16 m = mask_of(c);
        const __m512 prod = _mm512_mul_ps(_mm512_maskz_loadu_ps(m, q + 16 * c), _mm512_maskz_loadu_ps(m, k + 16 * c));
        acc = _mm512_mask_add_ps(acc, m, acc, prod);
      }
      probs[j] = reduce_tree(acc) * score_scale;
      max = std::max(max, probs[j]);
    }
  attention_softmax(probs, len, max);
  for (int64_t c0 = 0; c0 < chunks; c0 += kOutChunks) {
    const int64_t n = std::min(kOutChunks, chunks - c0);
    __m512 acc[kOutChunks];
    for (int64_t c = 0; c < kOutChunks; ++c) acc[c] = _mm512_setzero_ps();
    j = 0;
    for (int s = 0; s < num_segments; ++s)
      for (int64_t i = 0; i < segments[s].rows; ++i, ++j) {
        const float* v = segments[s].v + i * stride + 16 * c0;
        const __m512 p = _mm512_set1_ps(probs[j]);
        for (int64_t c = 0; c < n; ++c)
          acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(p, _mm512_maskz_loadu_ps(mask_of(c0 + c), v + 16 * c)));
      }
    for (int64_t c = 0; c < n; ++c) {
      __m512 o = acc[c];
      if (value_scale != 1.0f) o = _mm512_mul_ps(o, _mm512_set1_ps(value_scale));
      _mm512_mask_storeu_ps(out + 16 * (c0 + c), mask_of(c0 + c), o);
    }
  }
}

}  // namespace fp8rl::detail

FP8RL_AVX512_END
