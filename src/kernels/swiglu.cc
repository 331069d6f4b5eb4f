#include "kernels/swiglu.h"

#include <algorithm>
#include <cmath>

#include "core/thread_pool.h"

namespace fp8rl {

namespace {
inline float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// fn(i0, i1) over [0, n) in chunks on the kernel pool (elementwise: same bits for any thread count).
template <typename Fn>
void for_chunks(int64_t n, const Fn& fn) {
  constexpr int64_t kChunk = 16384;
  kernel_thread_pool().parallel_for((n + kChunk - 1) / kChunk,
                                    [&](int64_t t) { fn(t * kChunk, std::min(n, (t + 1) * kChunk)); });
}
}  // namespace

void swiglu_forward(float* s, const float* g, const float* u, int64_t n) {
  for_chunks(n, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) s[i] = (g[i] * sigmoid(g[i])) * u[i];
  });
}

void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n) {
  for_chunks(n, [&](int64_t i0, int64_t i1) {
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
