#include "kernels/rmsnorm.h"

#include <cmath>

namespace fp8rl {

void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float* yr = y + r * dim;
    double sum_sq = 0.0;  // double: the mean of squares is the one reduction whose error we can avoid cheaply
    for (int64_t i = 0; i < dim; ++i) sum_sq += static_cast<double>(xr[i]) * xr[i];
    const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
    rstd[r] = s;
    for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * s) * w[i];
  }
}

void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t dim, bool accumulate_dx) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* dyr = dy + r * dim;
    float* dxr = dx + r * dim;
    const float s = rstd[r];
    // y_i = x_i s w_i with s = (mean x^2 + eps)^-1/2, so ds/dx_j = -s^3 x_j / dim and
    // dx_j = s w_j dy_j - x_j s^3 / dim * sum_i(dy_i w_i x_i).
    double dot = 0.0;
    for (int64_t i = 0; i < dim; ++i) {
      dot += static_cast<double>(dyr[i]) * w[i] * xr[i];
      dw[i] += dyr[i] * (xr[i] * s);
    }
    const float c = static_cast<float>(dot * s * s * s / static_cast<double>(dim));
    for (int64_t i = 0; i < dim; ++i) {
      const float g = s * w[i] * dyr[i] - xr[i] * c;
      dxr[i] = accumulate_dx ? dxr[i] + g : g;
    }
  }
}

}  // namespace fp8rl
