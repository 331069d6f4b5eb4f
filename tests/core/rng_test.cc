// ctest-file-label: quick
#include "core/rng.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8rl {
namespace {

// Known-answer vectors of Philox4x32-10 published with the Random123 library (kat_vectors):
// key (k0, k1), counter (c0..c3) -> output.
TEST(Philox, MatchesPublishedKnownAnswers) {
  struct Kat {
    uint32_t k0, k1;
    PhiloxBlock counter, expected;
  };
  const Kat kats[] = {
      {0x00000000, 0x00000000, {0, 0, 0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {0xffffffff, 0xffffffff, {0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {0xa4093822, 0x299f31d0, {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Kat& kat : kats) {
    const uint64_t key = (static_cast<uint64_t>(kat.k1) << 32) | kat.k0;
    EXPECT_EQ(philox4x32(key, kat.counter), kat.expected);
  }
}

TEST(Rng, ValueDependsOnlyOnSeedStreamAndIndex) {
  std::vector<float> a(1001), b(1001);
  fill_uniform(a.data(), 1001, 0.0f, 1.0f, 42, 3);
  fill_uniform(b.data(), 1001, 0.0f, 1.0f, 42, 3);
  EXPECT_EQ(a, b);
  for (uint64_t i : {0u, 1u, 3u, 4u, 999u, 1000u}) EXPECT_EQ(a[i], random_uniform(42, 3, i)) << i;
  RandomStream s(42, 3, 997);
  EXPECT_EQ(s.next_uniform(), a[997]);
  fill_uniform(b.data(), 1001, 0.0f, 1.0f, 42, 4);
  EXPECT_NE(a, b);
}

TEST(Rng, UniformAndNormalMoments) {
  const int64_t n = 200000;
  std::vector<float> u(n), g(n);
  fill_uniform(u.data(), n, -1.0f, 3.0f, 7, 0);
  fill_normal(g.data(), n, 2.0f, 0.5f, 7, 1);
  double su = 0, sg = 0, sg2 = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_GE(u[i], -1.0f);
    ASSERT_LT(u[i], 3.0f);
    ASSERT_TRUE(std::isfinite(g[i]));
    su += u[i];
    sg += g[i];
    sg2 += static_cast<double>(g[i]) * g[i];
  }
  const double mean_g = sg / n;
  EXPECT_NEAR(su / n, 1.0, 0.02);
  EXPECT_NEAR(mean_g, 2.0, 0.01);
  EXPECT_NEAR(std::sqrt(sg2 / n - mean_g * mean_g), 0.5, 0.01);
}

TEST(Rng, NextBelowStaysInRange) {
  RandomStream s(1, 2);
  std::vector<int> counts(5);
  for (int i = 0; i < 50000; ++i) {
    const uint32_t v = s.next_below(5);
    ASSERT_LT(v, 5u);
    ++counts[v];
  }
  for (int c : counts) EXPECT_NEAR(c, 10000, 500);
}

}  // namespace
}  // namespace fp8rl
