// Comparing a fast product with its scalar twin under a tolerance derived from the inputs.
//
// Both compute sums of the same exact products (BF16 and E4M3 products are exact in FP32) in
// FP32, in different orders. Any order of n additions is within n * eps32 * sum|terms| of the
// exact sum, so each of the two results is, and their difference is within twice that:
//   |fast - twin| <= 2 * (n + 2) * eps32 * sum_k |a_k b_k| (+ tiny, for the 0 case)
// where n is the number of additions (K, plus one per 128-slice promotion for FP8) and the sum of
// magnitudes includes the scales. FP32 inputs (products rounded, FMA in the fast path) get the
// same form with one more rounding per term.
#pragma once

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

namespace fp8rl::testing {

// fast and twin are [M, N] with row stride ld; magnitude[m * N + n] = sum_k |a_mk b_kn| in
// double; `additions` is n above.
inline void expect_close_to_twin(const std::string& what, int64_t M, int64_t N, const float* fast,
                                 const float* twin, int64_t ld, const std::vector<double>& magnitude,
                                 int64_t additions) {
  double worst_ratio = 0.0;
  int64_t worst_m = 0, worst_n = 0;
  double worst_bound = 0.0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      const double err = std::fabs(static_cast<double>(fast[m * ld + n]) - twin[m * ld + n]);
      const double bound = 2.0 * static_cast<double>(additions + 2) * FLT_EPSILON *
                               magnitude[static_cast<size_t>(m * N + n)] + 1e-30;
      const double ratio = std::isnan(err) ? INFINITY : err / bound;
      if (ratio >= worst_ratio) {
        worst_ratio = ratio;
        worst_m = m;
        worst_n = n;
        worst_bound = bound;
      }
    }
  EXPECT_LE(worst_ratio, 1.0) << what << ": worst element (" << worst_m << ", " << worst_n << "): fast "
                              << fast[worst_m * ld + worst_n] << " twin " << twin[worst_m * ld + worst_n]
                              << " bound " << worst_bound << " (error / bound = " << worst_ratio << ")";
}

}  // namespace fp8rl::testing
