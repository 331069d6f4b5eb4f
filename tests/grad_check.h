// Central finite differences for gradient checks.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

namespace fp8rl::testing {

// Checks analytic[i] against (loss(x[i] + h) - loss(x[i] - h)) / 2h for the indices
// 0, stride, 2*stride, ... of x[0..n). Tolerance: abs_tol + rel_tol * |numeric|. Reports the
// worst element.
inline void expect_gradient_matches(const std::string& what, float* x, int64_t n, const float* analytic,
                                    const std::function<double()>& loss, double h, double abs_tol, double rel_tol,
                                    int64_t stride = 1) {
  double worst = 0.0;
  int64_t worst_i = -1;
  double worst_num = 0.0;
  for (int64_t i = 0; i < n; i += stride) {
    const float saved = x[i];
    x[i] = static_cast<float>(saved + h);
    const double up = loss();
    x[i] = static_cast<float>(saved - h);
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2.0 * h);
    const double excess = std::fabs(numeric - analytic[i]) - (abs_tol + rel_tol * std::fabs(numeric));
    if (excess > worst) {
      worst = excess;
      worst_i = i;
      worst_num = numeric;
    }
  }
  EXPECT_LE(worst, 0.0) << what << ": worst element " << worst_i << " numeric " << worst_num << " analytic "
                        << (worst_i >= 0 ? analytic[worst_i] : 0.0f);
}

}  // namespace fp8rl::testing
