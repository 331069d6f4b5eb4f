// SwiGLU gate of the Llama MLP, forward next to backward. FP32 math, sigmoid_f32 (numerics/exp.h):
// the AVX-512 path gives the portable path's bits.
//
//   s = silu(g) * u,   silu(g) = g * sigmoid(g)
//
// Shapes: g, u, s, dg, du, ds [n] (any layout, elementwise).
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace fp8rl {

// With round_output_bf16, s is rounded to BF16 values (bf16_round_f32) in the same task.
void swiglu_forward(float* s, const float* g, const float* u, int64_t n, bool round_output_bf16 = false,
                    Isa isa = Isa::kAuto);
// Overwrites dg and du.
void swiglu_backward(float* dg, float* du, const float* ds, const float* g, const float* u, int64_t n,
                     Isa isa = Isa::kAuto);

}  // namespace fp8rl
