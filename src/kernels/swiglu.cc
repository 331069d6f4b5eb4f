// SwiGLU forward and backward: a scalar loop and an AVX-512 loop that computes the same bits
// (sigmoid_f32 has bit-identical lanes, and each lane performs the scalar expression's
// operations in its order).
#include "kernels/swiglu.h"

#include "core/cpu_features.h"
#include "core/thread_pool.h"
#include "numerics/codec.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see those headers)
#include "numerics/avx512_exp_inl.h"
FP8RL_AVX512_END

namespace fp8rl {

namespace {

// Elements per task (elementwise: same bits for any thread count). Each element costs an exp, so
// even a decode step's few thousand elements are worth splitting across the pool.
constexpr int64_t kChunk = 2048;

void forward_scalar(float* s, const float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) s[i] = (g[i] * sigmoid_f32(g[i])) * u[i];
}

void backward_scalar(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float sg = sigmoid_f32(g[i]);
    const float silu = g[i] * sg;
    // d silu / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
    dg[i] = ds[i] * u[i] * (sg * (1.0f + g[i] * (1.0f - sg)));
    du[i] = ds[i] * silu;
  }
}

FP8RL_AVX512_BEGIN

// The first min(left, 16) lanes.
inline __mmask16 tail_mask(int64_t left) { return static_cast<__mmask16>(avx512::first_bytes_mask(left)); }

void forward_avx512(float* s, const float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i);
    const __m512 silu = _mm512_mul_ps(gv, avx512::sigmoid16(gv));
    _mm512_mask_storeu_ps(s + i, m, _mm512_mul_ps(silu, _mm512_maskz_loadu_ps(m, u + i)));
  }
}

void backward_avx512(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = tail_mask(n - i);
    const __m512 gv = _mm512_maskz_loadu_ps(m, g + i), dsv = _mm512_maskz_loadu_ps(m, ds + i);
    const __m512 sg = avx512::sigmoid16(gv);
    const __m512 dsilu = _mm512_mul_ps(sg, _mm512_add_ps(one, _mm512_mul_ps(gv, _mm512_sub_ps(one, sg))));
    _mm512_mask_storeu_ps(dg + i, m, _mm512_mul_ps(_mm512_mul_ps(dsv, _mm512_maskz_loadu_ps(m, u + i)), dsilu));
    _mm512_mask_storeu_ps(du + i, m, _mm512_mul_ps(dsv, _mm512_mul_ps(gv, sg)));
  }
}

FP8RL_AVX512_END

}  // namespace

void swiglu_forward(float* s, const float* g, const float* u, int64_t n, bool round_output_bf16, Isa isa) {
  const bool avx512 = uses_avx512(resolve_isa(isa));
  parallel_for_ranges(n, kChunk, [&](int64_t i0, int64_t i1) {
    (avx512 ? forward_avx512 : forward_scalar)(s + i0, g + i0, u + i0, i1 - i0);
    if (round_output_bf16) bf16_round_f32(s + i0, i1 - i0, isa);
  });
}

void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n, Isa isa) {
  const bool avx512 = uses_avx512(resolve_isa(isa));
  parallel_for_ranges(n, kChunk, [&](int64_t i0, int64_t i1) {
    (avx512 ? backward_avx512 : backward_scalar)(dg + i0, du + i0, ds + i0, g + i0, u + i0, i1 - i0);
  });
}

}  // namespace fp8rl
