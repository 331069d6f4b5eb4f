// attention_row_f32 (every ISA) against the scalar attention_row template: the same bits.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "kernels/attention_row.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

TEST(AttentionRow, EveryIsaGivesTheScalarTemplatesBits) {
  struct Case {
    int64_t D, len, stride;
    int split;  // positions in the first segment (the rest in a second one), or -1 for one segment
    float score_scale, value_scale;
  };
  const Case cases[] = {{16, 1, 16, -1, 0.25f, 1.0f},   {32, 7, 128, 3, 0.17f, 1.0f},   {40, 33, 40, 32, 0.3f, 0.5f},
                        {64, 300, 256, 17, 0.125f, 1.0f}, {128, 65, 512, 64, 0.09f, 3.0f}, {8, 5, 24, 0, 1.0f, 1.0f},
                        {200, 20, 200, 19, 0.07f, 1.0f}};
  for (const Case& c : cases) {
    std::vector<float> q(static_cast<size_t>(c.D)), k(static_cast<size_t>(c.len * c.stride)), v(k.size());
    fill_normal(q.data(), c.D, 0.0f, 2.0f, 5, 1);
    fill_normal(k.data(), c.len * c.stride, 0.0f, 2.0f, 5, 2);
    fill_normal(v.data(), c.len * c.stride, 0.0f, 1.0f, 5, 3);
    if (c.D >= 16) q[3] = -0.0f, k[3] = 0.0f;  // a signed zero product
    std::vector<float> want(static_cast<size_t>(c.D)), want_p(static_cast<size_t>(c.len));
    attention_row(
        want.data(), want_p.data(), q.data(), c.len, c.D, c.score_scale, c.value_scale,
        [&](int64_t j, float*) { return k.data() + j * c.stride; },
        [&](int64_t j, float*) { return v.data() + j * c.stride; }, nullptr);
    std::vector<AttentionRows> segments;
    const int64_t first = c.split < 0 ? c.len : c.split;
    if (first > 0) segments.push_back({k.data(), v.data(), first});
    if (c.len > first) segments.push_back({k.data() + first * c.stride, v.data() + first * c.stride, c.len - first});
    for (Isa isa : testing::available_isas()) {
      std::vector<float> got(want.size(), 7.0f), got_p(want_p.size(), 7.0f);
      attention_row_f32(got.data(), got_p.data(), q.data(), segments.data(), static_cast<int>(segments.size()), c.len,
                        c.D, c.stride, c.score_scale, c.value_scale, isa);
      const std::string what = std::string(isa_name(isa)) + " D=" + std::to_string(c.D) + " len=" + std::to_string(c.len);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << what;
      EXPECT_EQ(0, std::memcmp(got_p.data(), want_p.data(), want_p.size() * 4)) << what;
    }
  }
}

TEST(AttentionRow, SegmentsMustCoverTheRow) {
  std::vector<float> q(16), k(32), v(32), out(16), p(2);
  const AttentionRows one{k.data(), v.data(), 1};
  const std::string message = testing::error_message(
      [&] { attention_row_f32(out.data(), p.data(), q.data(), &one, 1, 2, 16, 16, 1.0f, 1.0f); });
  EXPECT_NE(message.find("the segments hold 1 positions, the row attends to 2"), std::string::npos) << message;
}

}  // namespace
}  // namespace fp8rl
