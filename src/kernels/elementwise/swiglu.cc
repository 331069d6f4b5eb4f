// SwiGLU forward and backward: a scalar loop and AVX2 / AVX-512 loops that compute the same bits
// (sigmoid_f32 has bit-identical lanes, and each lane performs the scalar expression's
// operations in its order).
#include "kernels/elementwise/swiglu.h"

#include "core/isa_dispatch.h"
#include "core/thread_pool.h"
#include "numerics/codec.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see those headers)
#include "numerics/avx512_exp_inl.h"
FP8RL_AVX512_END
FP8RL_AVX2_BEGIN
#include "numerics/avx2_codec_inl.h"
#include "numerics/avx2_exp_inl.h"
FP8RL_AVX2_END

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

FP8RL_AVX2_BEGIN

// Eight lanes of the AVX-512 loops' expressions (same operations, same order). Full vectors use
// plain loads and stores (masked stores are slow on AMD cores); the tail goes through masked
// loads (zero lanes, never stored).
inline __m256 load8(const float* p, __m256i m, bool tail) {
  return tail ? _mm256_maskload_ps(p, m) : _mm256_loadu_ps(p);
}
inline void store8(float* p, __m256i m, bool tail, __m256 v) {
  if (tail)
    _mm256_maskstore_ps(p, m, v);
  else
    _mm256_storeu_ps(p, v);
}

void forward_avx2(float* s, const float* g, const float* u, int64_t n) {
  for (int64_t i = 0; i < n; i += 8) {
    const bool tail = n - i < 8;
    const __m256i m = avx2::first_lanes_mask(n - i);
    const __m256 gv = load8(g + i, m, tail);
    const __m256 silu = _mm256_mul_ps(gv, avx2::sigmoid8(gv));
    store8(s + i, m, tail, _mm256_mul_ps(silu, load8(u + i, m, tail)));
  }
}

void backward_avx2(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t i = 0; i < n; i += 8) {
    const bool tail = n - i < 8;
    const __m256i m = avx2::first_lanes_mask(n - i);
    const __m256 gv = load8(g + i, m, tail), dsv = load8(ds + i, m, tail);
    const __m256 sg = avx2::sigmoid8(gv);
    const __m256 dsilu = _mm256_mul_ps(sg, _mm256_add_ps(one, _mm256_mul_ps(gv, _mm256_sub_ps(one, sg))));
    store8(dg + i, m, tail, _mm256_mul_ps(_mm256_mul_ps(dsv, load8(u + i, m, tail)), dsilu));
    store8(du + i, m, tail, _mm256_mul_ps(dsv, _mm256_mul_ps(gv, sg)));
  }
}

FP8RL_AVX2_END

// AMX has no loops of its own and runs AVX-512's.
constexpr IsaTable<void (*)(float*, const float*, const float*, int64_t)> kForward{
    .portable = forward_scalar, .avx2 = forward_avx2, .avx512 = forward_avx512};
constexpr IsaTable<void (*)(float*, float*, const float*, const float*, const float*, int64_t)> kBackward{
    .portable = backward_scalar, .avx2 = backward_avx2, .avx512 = backward_avx512};

}  // namespace

void swiglu_forward(float* s, const float* g, const float* u, int64_t n, bool round_output_bf16, Isa isa) {
  const auto forward = pick(kForward, isa);
  parallel_for_ranges(n, kChunk, [&](int64_t i0, int64_t i1) {
    forward(s + i0, g + i0, u + i0, i1 - i0);
    if (round_output_bf16) bf16_round_f32(s + i0, i1 - i0, isa);
  });
}

void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n, Isa isa) {
  const auto backward = pick(kBackward, isa);
  parallel_for_ranges(n, kChunk,
                      [&](int64_t i0, int64_t i1) { backward(dg + i0, du + i0, ds + i0, g + i0, u + i0, i1 - i0); });
}

}  // namespace fp8rl
