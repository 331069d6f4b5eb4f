// Teacher-forced log-probs (token_logprob, what `fp8rl score` reports) are the sampler's own
// log-probs bit for bit, at every temperature and truncation.
// ctest-file-label: quick
#include "generation/sampling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/rng.h"

namespace fp8rl {
namespace {

TEST(Sampling, TeacherForcedLogprobsAreTheSamplersBits) {
  const int64_t V = 300;
  std::vector<float> logits(V), scratch(2 * V);
  for (int64_t v = 0; v < V; ++v) logits[static_cast<size_t>(v)] = static_cast<float>(4.0 * random_uniform(7, 1, static_cast<uint64_t>(v)) - 2.0);
  logits[17] = logits[18];  // a tie
  const SamplingParams params[] = {{1.0f, 0, 1.0f, 3}, {0.7f, 0, 1.0f, 3}, {1.0f, 20, 1.0f, 3},
                                   {1.3f, 0, 0.9f, 3}, {0.8f, 50, 0.5f, 3}, {0.0f, 0, 1.0f, 3}};
  for (const SamplingParams& p : params)
    for (uint64_t step = 0; step < 200; ++step) {
      const SampledToken t = sample_token(logits.data(), V, p, /*sequence=*/5, step, scratch.data());
      const float lp = token_logprob(logits.data(), V, p, t.token, scratch.data());
      ASSERT_EQ(std::memcmp(&lp, &t.logprob, sizeof lp), 0)
          << "temperature " << p.temperature << " top_k " << p.top_k << " top_p " << p.top_p << " token " << t.token
          << ": " << lp << " vs " << t.logprob;
    }
  // A token that truncation leaves out has probability 0.
  const SamplingParams top1{1.0f, 1, 1.0f, 3};
  int32_t worst = 0;
  for (int64_t v = 1; v < V; ++v)
    if (logits[static_cast<size_t>(v)] < logits[static_cast<size_t>(worst)]) worst = static_cast<int32_t>(v);
  EXPECT_EQ(token_logprob(logits.data(), V, top1, worst, scratch.data()), -INFINITY);
}

}  // namespace
}  // namespace fp8rl
