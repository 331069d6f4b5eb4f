// A double-precision sum of products in 8 lanes (element i goes to lane i % 8) added in a fixed
// tree: independent chains that the compiler can vectorise, with the same bits on every machine
// and for any thread count (RMSNorm's mean of squares, the global gradient norm).
#pragma once

#include <cstdint>

namespace fp8rl {

// sum_i a[i] b[i] (times c[i] with kWithC) in double.
template <bool kWithC = false>
inline double sum_products_f64(const float* a, const float* b, const float* c, int64_t n) {
  auto term = [&](int64_t i) {
    const double ab = static_cast<double>(a[i]) * b[i];
    if constexpr (kWithC) return ab * c[i];
    return ab;
  };
  double lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) lanes[l] += term(i + l);
  for (; i < n; ++i) lanes[i % 8] += term(i);
  return ((lanes[0] + lanes[4]) + (lanes[2] + lanes[6])) + ((lanes[1] + lanes[5]) + (lanes[3] + lanes[7]));
}

}  // namespace fp8rl
