// The 95 % intervals of the report's summary, against values worked by hand from the t table.
// ctest-file-label: quick
#include "report/intervals.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fp8rl::report {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TEST(Intervals, TQuantileIsTheTableRowAtOrBelowTheDegreesOfFreedom) {
  EXPECT_EQ(t_quantile_975(1), 12.706);
  EXPECT_EQ(t_quantile_975(4), 2.776);
  EXPECT_EQ(t_quantile_975(4.9), 2.776);  // Welch's fractional df: the row below, a wider interval
  EXPECT_EQ(t_quantile_975(30), 2.042);
  EXPECT_EQ(t_quantile_975(59), 2.021);
  EXPECT_EQ(t_quantile_975(1e9), 1.980);  // the 120 row: the table has no row between 120 and infinity
  EXPECT_EQ(t_quantile_975(INFINITY), 1.960);
  EXPECT_TRUE(std::isnan(t_quantile_975(0.5)));
  EXPECT_TRUE(std::isnan(t_quantile_975(kNaN)));
  for (double df = 1; df < 200; df += 0.5) EXPECT_GE(t_quantile_975(df), t_quantile_975(df + 0.5)) << df;
}

TEST(Intervals, MeanIntervalIsTTimesTheStandardError) {
  // s^2 = 2.5, se = sqrt(2.5 / 5), t_{0.975,4} = 2.776.
  const Interval m = mean_interval({1, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(m.value, 3);
  EXPECT_NEAR(m.half_width, 2.776 * std::sqrt(0.5), 1e-12);
  // Non-finite values (a run without a validation) are left out.
  const Interval n = mean_interval({1, kNaN, 2, 3, 4, 5});
  EXPECT_DOUBLE_EQ(n.half_width, m.half_width);
  EXPECT_EQ(mean_interval({0.5, 0.5, 0.5}).half_width, 0.0);
  EXPECT_TRUE(std::isnan(mean_interval({0.5}).half_width));
  EXPECT_TRUE(std::isnan(mean_interval({}).value));
}

TEST(Intervals, WelchDifferenceUsesUnequalVariances) {
  // a: mean 2, s^2 1 (n 3); b: mean 5, s^2 20/3 (n 4). se^2 = 1/3 + 5/3 = 2,
  // df = 4 / ((1/3)^2 / 2 + (5/3)^2 / 3) = 4.08 -> t row 4 = 2.776.
  const Interval d = welch_difference({1, 2, 3}, {2, 4, 6, 8});
  EXPECT_DOUBLE_EQ(d.value, -3);
  EXPECT_NEAR(d.half_width, 2.776 * std::sqrt(2.0), 1e-12);
  EXPECT_EQ(welch_difference({0.5, 0.5}, {0.25, 0.25}).half_width, 0.0);
  EXPECT_DOUBLE_EQ(welch_difference({0.5, 0.5}, {0.25, 0.25}).value, 0.25);
  EXPECT_TRUE(std::isnan(welch_difference({0.5}, {0.25, 0.3}).half_width));
}

}  // namespace
}  // namespace fp8rl::report
