#include "kernels/elementwise/rmsnorm.h"

#include <cmath>

#include "core/thread_pool.h"
#include "kernels/simd/lane_sums.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {
constexpr int64_t kRowsPerTask = 32;
constexpr int64_t kColsPerTask = 64;
}  // namespace

// Rows are independent: blocks of rows run on the kernel pool (same bits for any thread count).
void rmsnorm_forward(float* y, float* rstd, const float* x, const float* w, int64_t rows, int64_t dim, float eps,
                     bool round_output_bf16) {
  parallel_for_ranges(rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      float* yr = y + r * dim;
      // double: the mean of squares is the one reduction whose error we can avoid cheaply
      const double sum_sq = sum_products_f64(xr, xr, nullptr, dim);
      const float s = static_cast<float>(1.0 / std::sqrt(sum_sq / static_cast<double>(dim) + eps));
      rstd[r] = s;
      for (int64_t i = 0; i < dim; ++i) yr[i] = (xr[i] * s) * w[i];
    }
    if (round_output_bf16) bf16_round_f32(y + r0 * dim, (r1 - r0) * dim);
  });
}

// dx row by row (blocks of rows on the pool); dw column by column (blocks of columns on the
// pool), each column summing its rows in order as a single loop would, from zero.
void rmsnorm_backward(float* dx, float* dw, const float* dy, const float* x, const float* w, const float* rstd,
                      int64_t rows, int64_t dim, bool accumulate_dx) {
  parallel_for_ranges(rows, kRowsPerTask, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x + r * dim;
      const float* dyr = dy + r * dim;
      float* dxr = dx + r * dim;
      const float s = rstd[r];
      // y_i = x_i s w_i with s = (mean x^2 + eps)^-1/2, so ds/dx_j = -s^3 x_j / dim and
      // dx_j = s w_j dy_j - x_j s^3 / dim * sum_i(dy_i w_i x_i).
      const double dot = sum_products_f64<true>(dyr, w, xr, dim);
      const float c = static_cast<float>(dot * s * s * s / static_cast<double>(dim));
      for (int64_t i = 0; i < dim; ++i) {
        const float g = s * w[i] * dyr[i] - xr[i] * c;
        dxr[i] = accumulate_dx ? dxr[i] + g : g;
      }
    }
  });
  // dw: each column's rows summed in order from zero, then added to dw once (one term per call:
  // see Transformer::backward's gradient contract).
  parallel_for_ranges(dim, kColsPerTask, [&](int64_t i0, int64_t i1) {
    float sum[kColsPerTask] = {};
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = i0; i < i1; ++i) sum[i - i0] += dy[r * dim + i] * (x[r * dim + i] * rstd[r]);
    for (int64_t i = i0; i < i1; ++i) dw[i] += sum[i - i0];
  });
}

}  // namespace fp8rl
