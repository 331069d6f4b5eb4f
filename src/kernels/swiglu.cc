#include "kernels/swiglu.h"

#include <cmath>

#include "core/thread_pool.h"

namespace fp8rl {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// Elements per task (elementwise: same bits for any thread count). Each element costs an expf, so
// even a decode step's few thousand elements are worth splitting across the pool.
constexpr int64_t kChunk = 2048;
}  // namespace

void swiglu_forward(float* s, const float* g, const float* u, int64_t n) {
  parallel_for_ranges(n, kChunk, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) s[i] = (g[i] * sigmoid(g[i])) * u[i];
  });
}

void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n) {
  parallel_for_ranges(n, kChunk, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const float sg = sigmoid(g[i]);
      const float silu = g[i] * sg;
      // d silu / dg = sigmoid(g) * (1 + g * (1 - sigmoid(g)))
      dg[i] = ds[i] * u[i] * (sg * (1.0f + g[i] * (1.0f - sg)));
      du[i] = ds[i] * silu;
    }
  });
}

}  // namespace fp8rl
