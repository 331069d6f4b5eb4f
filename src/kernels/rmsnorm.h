// RMSNorm over the last dimension, forward next to backward. FP32 math.
//
//   y[n, :] = x[n, :] * rstd[n] * w,   rstd[n] = 1 / sqrt(mean(x[n, :]^2) + eps)
//
// Shapes: x, y, dx [rows, dim] row-major (contiguous); w, dw [dim]; rstd [rows].
#pragma once

#include <cstdint>

namespace fp8rl {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps);

// dx (+)= d/dx; dw += d/dw. `rstd` is the forward's. With accumulate_dx false, dx is overwritten.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t dim, bool accumulate_dx);

}  // namespace fp8rl
