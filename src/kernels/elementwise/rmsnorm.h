// RMSNorm over the last dimension, forward next to backward. FP32 math.
//
//   y[n, :] = x[n, :] * rstd[n] * w,   rstd[n] = 1 / sqrt(mean(x[n, :]^2) + eps)
//
// Shapes: x, y, dx [rows, dim] row-major (contiguous); w, dw [dim]; rstd [rows].
#pragma once

#include <cstdint>

namespace fp8rl {

// With round_output_bf16, y is rounded to BF16 values (bf16_round_f32) in the same task.
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                     bool round_output_bf16 = false);

// dx (+)= d/dx; dw += d/dw, where d/dw (the rows' terms summed in row order from zero) is added
// to dw once. `rstd` is the forward's. With accumulate_dx false, dx is overwritten.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t dim, bool accumulate_dx);

}  // namespace fp8rl
