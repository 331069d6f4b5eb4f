// 95 % confidence intervals over a handful of seeds: of one preset's mean (Student's t) and of
// the difference between two presets' means (Welch's t, unequal variances).
//
// The t quantiles are the published two-sided 95 % table (t_{0.975, df}) for df = 1..30, 40, 60,
// 120 and infinity; a df between table rows takes the row below (a wider, conservative interval),
// as Welch's fractional degrees of freedom do.
#pragma once

#include <vector>

namespace fp8rl::report {

// t_{0.975, df} for df >= 1 (NaN for df < 1 or NaN).
double t_quantile_975(double df);

// A mean (or a difference of means) and the half-width of its 95 % interval: the interval is
// [value - half_width, value + half_width]. half_width is NaN where it is undefined (fewer than
// two values on a side), 0 where every value on each side is the same.
struct Interval {
  double value;
  double half_width;
};

// The mean of the finite values and its interval, mean +- t_{0.975, n-1} * s / sqrt(n).
Interval mean_interval(const std::vector<double>& values);

// mean(a) - mean(b) over their finite values, with Welch's interval:
// se^2 = s_a^2 / n_a + s_b^2 / n_b, df = se^4 / ((s_a^2 / n_a)^2 / (n_a - 1) + (s_b^2 / n_b)^2 / (n_b - 1)).
Interval welch_difference(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fp8rl::report
