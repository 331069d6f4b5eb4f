#include "report/intervals.h"

#include <array>
#include <cmath>
#include <limits>
#include <utility>

namespace fp8rl::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// (df, t_{0.975, df}), the standard table.
constexpr std::array<std::pair<double, double>, 34> kT975 = {{
    {1, 12.706}, {2, 4.303},  {3, 3.182},  {4, 2.776},  {5, 2.571},   {6, 2.447},        {7, 2.365},
    {8, 2.306},  {9, 2.262},  {10, 2.228}, {11, 2.201}, {12, 2.179},  {13, 2.160},       {14, 2.145},
    {15, 2.131}, {16, 2.120}, {17, 2.110}, {18, 2.101}, {19, 2.093},  {20, 2.086},       {21, 2.080},
    {22, 2.074}, {23, 2.069}, {24, 2.064}, {25, 2.060}, {26, 2.056},  {27, 2.052},       {28, 2.048},
    {29, 2.045}, {30, 2.042}, {40, 2.021}, {60, 2.000}, {120, 1.980}, {INFINITY, 1.960},
}};

// Count, mean and sample variance (n - 1) of the finite values.
struct Moments {
  double n = 0, mean = kNaN, variance = kNaN;
};

Moments moments(const std::vector<double>& values) {
  Moments m;
  double sum = 0;
  for (double x : values) {
    if (!std::isfinite(x)) continue;
    sum += x;
    m.n += 1;
  }
  if (m.n == 0) return m;
  m.mean = sum / m.n;
  if (m.n < 2) return m;
  double squares = 0;
  for (double x : values)
    if (std::isfinite(x)) squares += (x - m.mean) * (x - m.mean);
  m.variance = squares / (m.n - 1);
  return m;
}

}  // namespace

double t_quantile_975(double df) {
  if (!(df >= 1)) return kNaN;
  double t = kT975.front().second;
  for (const auto& [row_df, row_t] : kT975) {
    if (row_df > df) break;
    t = row_t;
  }
  return t;
}

Interval mean_interval(const std::vector<double>& values) {
  const Moments m = moments(values);
  if (m.n < 2) return {m.mean, kNaN};
  return {m.mean, t_quantile_975(m.n - 1) * std::sqrt(m.variance / m.n)};
}

Interval welch_difference(const std::vector<double>& a, const std::vector<double>& b) {
  const Moments ma = moments(a), mb = moments(b);
  const double difference = ma.mean - mb.mean;
  if (ma.n < 2 || mb.n < 2) return {difference, kNaN};
  const double va = ma.variance / ma.n, vb = mb.variance / mb.n;
  const double se2 = va + vb;
  if (se2 == 0) return {difference, 0.0};
  const double df = se2 * se2 / (va * va / (ma.n - 1) + vb * vb / (mb.n - 1));
  return {difference, t_quantile_975(df) * std::sqrt(se2)};
}

}  // namespace fp8rl::report
