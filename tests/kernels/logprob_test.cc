// The log-sum-exp and token log-prob kernels: every level gives the portable definition's bits
// (logprob.h), the definition is within a stated tolerance of the exact value (long double), and
// the backward is the exact gradient's formula.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"
#include "kernels/elementwise/logprob.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

std::vector<float> random_row(int64_t V, float stddev, uint64_t stream) {
  std::vector<float> x(static_cast<size_t>(V));
  fill_normal(x.data(), V, 0.0f, stddev, 77, stream);
  return x;
}

long double exact_lse(const std::vector<float>& x) {
  long double m = -INFINITY;
  for (float v : x) m = std::max<long double>(m, v);
  long double s = 0;
  for (float v : x) s += std::exp(static_cast<long double>(v) - m);
  return m + std::log(s);
}

// Lengths around the 16-lane and 2048-element block edges, and a real vocabulary.
const int64_t kLengths[] = {1, 15, 16, 17, 99, 2047, 2048, 2049, 5003, 151936};

TEST(Logprob, EveryLevelGivesTheDefinitionsBits) {
  uint64_t stream = 0;
  for (int64_t V : kLengths)
    for (float stddev : {0.01f, 3.0f, 40.0f}) {
      std::vector<float> x = random_row(V, stddev, ++stream);
      if (V > 20) x[7] = -INFINITY, x[V - 3] = x[V - 2];  // a masked logit, a tie
      const float want = logsumexp_row(x.data(), V, Isa::kPortable);
      for (Isa isa : testing::available_isas()) {
        const float got = logsumexp_row(x.data(), V, isa);
        EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << isa_name(isa) << " V " << V << " stddev " << stddev << ": " << got
                                                  << " vs " << want;
      }
      const long double exact = exact_lse(x);
      EXPECT_LE(std::fabs(static_cast<long double>(want) - exact), 1e-6L * (1 + std::fabs(exact)))
          << "V " << V << " stddev " << stddev;
    }
}

// A caller that sees a block of columns at a time (the LM head's forward) gets the whole row's
// bits from lse_block_stats_rows and lse_from_block_stats; rows with a whole block masked, the
// maximum in the last, short block, and every logit masked.
TEST(Logprob, BlockStatisticsGiveTheWholeRowsBits) {
  for (int64_t V : {int64_t{5003}, int64_t{151936}}) {
    const int64_t N = 4, blocks = (V + kLseBlock - 1) / kLseBlock;
    std::vector<float> logits(static_cast<size_t>(N * V));
    fill_normal(logits.data(), N * V, 0.0f, 3.0f, 9, static_cast<uint64_t>(V));
    float* masked_block = logits.data() + V;
    std::fill(masked_block + kLseBlock, masked_block + 2 * kLseBlock, -INFINITY);
    logits[static_cast<size_t>(3 * V - 1)] = 60.0f;  // row 2's max in its last block
    std::fill(logits.begin() + 3 * V, logits.end(), -INFINITY);
    for (Isa isa : testing::available_isas()) {
      std::vector<float> max(static_cast<size_t>(N * blocks)), sum(max.size());
      for (int64_t b = 0; b < blocks; ++b)
        lse_block_stats_rows(max.data() + b, sum.data() + b, blocks, logits.data() + b * kLseBlock, V,
                             std::min(kLseBlock, V - b * kLseBlock), N, isa);
      for (int64_t n = 0; n < N; ++n) {
        const float* row = logits.data() + n * V;
        const float got = lse_from_block_stats(max.data() + n * blocks, sum.data() + n * blocks, blocks);
        const float want = logsumexp_row(row, V, Isa::kPortable);
        EXPECT_EQ(std::memcmp(&got, &want, 4), 0) << isa_name(isa) << " V " << V << " row " << n;
        if (n == N - 1) {
          EXPECT_EQ(want, -INFINITY);
          continue;
        }
        const long double exact = exact_lse(std::vector<float>(row, row + V));
        EXPECT_LE(std::fabs(static_cast<long double>(want) - exact), 1e-6L * (1 + std::fabs(exact)))
            << "V " << V << " row " << n;
      }
    }
  }
}

TEST(Logprob, ForwardAndBackwardAreTheFormulasOnEveryLevel) {
  const int64_t N = 5, V = 2049 + 16;
  std::vector<float> logits(static_cast<size_t>(N * V));
  fill_normal(logits.data(), N * V, 0.0f, 4.0f, 5, 0);
  const std::vector<int32_t> targets = {3, -1, 2048, 0, V - 1};
  const std::vector<float> dlp = {0.5f, 1.0f, -2.0f, 0.0f, 1.5f};
  std::vector<float> lp_ref(N), lse_ref(N), d_ref(static_cast<size_t>(N * V));
  token_logprobs_forward(lp_ref.data(), lse_ref.data(), logits.data(), V, targets.data(), N, V, Isa::kPortable);
  token_logprobs_backward(d_ref.data(), logits.data(), V, 0, V, lse_ref.data(), dlp.data(), targets.data(), N,
                          Isa::kPortable);
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<float> row(logits.begin() + n * V, logits.begin() + (n + 1) * V);
    const long double lse = exact_lse(row);
    if (targets[static_cast<size_t>(n)] < 0) {
      EXPECT_EQ(lp_ref[static_cast<size_t>(n)], 0.0f);
      for (int64_t v = 0; v < V; ++v) EXPECT_EQ(d_ref[static_cast<size_t>(n * V + v)], 0.0f);
      continue;
    }
    EXPECT_NEAR(lp_ref[static_cast<size_t>(n)], row[static_cast<size_t>(targets[static_cast<size_t>(n)])] - lse, 2e-5);
    for (int64_t v = 0; v < V; ++v) {
      const long double p = std::exp(static_cast<long double>(row[static_cast<size_t>(v)]) - lse);
      const long double want = dlp[static_cast<size_t>(n)] * ((v == targets[static_cast<size_t>(n)] ? 1 : 0) - p);
      ASSERT_NEAR(d_ref[static_cast<size_t>(n * V + v)], want, 1e-6 + 1e-5 * std::fabs(want)) << n << " " << v;
    }
  }
  for (Isa isa : testing::available_isas()) {
    std::vector<float> lp(N), lse(N), d(static_cast<size_t>(N * V));
    token_logprobs_forward(lp.data(), lse.data(), logits.data(), V, targets.data(), N, V, isa);
    EXPECT_EQ(std::memcmp(lp.data(), lp_ref.data(), 4 * N), 0) << isa_name(isa);
    EXPECT_EQ(std::memcmp(lse.data(), lse_ref.data(), 4 * N), 0) << isa_name(isa);
    // In two column slices of a wider buffer, in place: the same bits as the whole row.
    std::vector<float> sliced = logits;
    const int64_t split = 1000;
    token_logprobs_backward(sliced.data(), sliced.data(), V, 0, split, lse.data(), dlp.data(), targets.data(), N, isa);
    token_logprobs_backward(sliced.data() + split, sliced.data() + split, V, split, V - split, lse.data(), dlp.data(),
                            targets.data(), N, isa);
    EXPECT_EQ(std::memcmp(sliced.data(), d_ref.data(), 4 * N * V), 0) << isa_name(isa);
  }
}

}  // namespace
}  // namespace fp8rl
