// SwiGLU gate of the Llama MLP, forward next to backward. FP32 math.
//
//   s = silu(g) * u,   silu(g) = g * sigmoid(g)
//
// Shapes: g, u, s, dg, du, ds [n] (any layout, elementwise).
#pragma once

#include <cstdint>

namespace fp8rl {

void swiglu_forward(float* s, const float* g, const float* u, int64_t n);
// Overwrites dg and du.
void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n);

}  // namespace fp8rl
