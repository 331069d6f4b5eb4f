// AdamW against a hand-computed update; clipping; schedules; non-finite gradients.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "model/optimizer.h"

namespace fp8rl {
namespace {

TEST(AdamW, TwoStepsMatchTheFormula) {
  ModelConfig c = model_preset("tiny", 8);
  ParamLayout layout(c);
  AdamWConfig cfg;
  cfg.lr = 0.1, cfg.weight_decay = 0.5, cfg.max_grad_norm = 0.0;
  AdamW opt(layout, cfg);
  std::vector<float> p(static_cast<size_t>(layout.numel()), 1.0f), g(p.size(), 0.0f);
  const ParamInfo& w = layout.find("model.layers.0.mlp.up_proj.weight");   // decayed
  const ParamInfo& n = layout.find("model.layers.0.input_layernorm.weight");  // not decayed
  g[static_cast<size_t>(w.offset)] = 0.5f;
  g[static_cast<size_t>(n.offset)] = -2.0f;
  opt.step(p.data(), g.data(), 0.1);
  // Step 1: m_hat = g, v_hat = g^2, update = lr * g / (|g| + eps) = lr * sign(g).
  EXPECT_NEAR(p[static_cast<size_t>(w.offset)], 1.0 * (1 - 0.1 * 0.5) - 0.1, 1e-6);
  EXPECT_NEAR(p[static_cast<size_t>(n.offset)], 1.0 + 0.1, 1e-6);
  EXPECT_NEAR(p[static_cast<size_t>(w.offset + 1)], 1.0 * (1 - 0.05), 1e-6);  // zero grad: decay only
  // Step 2 with the same gradient: m = g (0.1 + 0.09) ... the bias-corrected ratio stays sign(g).
  opt.step(p.data(), g.data(), 0.1);
  EXPECT_NEAR(p[static_cast<size_t>(n.offset)], 1.2, 1e-5);
}

TEST(AdamW, ClipsToMaxNormAndSkipsNonFinite) {
  ModelConfig c = model_preset("tiny", 8);
  ParamLayout layout(c);
  AdamWConfig cfg;
  cfg.max_grad_norm = 1.0;
  AdamW opt(layout, cfg);
  std::vector<float> p(static_cast<size_t>(layout.numel()), 0.0f), g(p.size(), 0.0f);
  g[0] = 3.0f, g[1] = 4.0f;
  // The update is that of the gradient times 1 / 5, bit for bit, and the gradient stays as it was.
  AdamWConfig unclipped = cfg;
  unclipped.max_grad_norm = 0.0;
  AdamW reference(layout, unclipped);
  std::vector<float> p_reference = p, g_scaled = g;
  g_scaled[0] = 3.0f * 0.2f, g_scaled[1] = 4.0f * 0.2f;
  reference.step(p_reference.data(), g_scaled.data(), 1e-3);
  EXPECT_DOUBLE_EQ(opt.step(p.data(), g.data(), 1e-3), 5.0);
  EXPECT_EQ(p, p_reference);
  EXPECT_NE(p[0], 0.0f);
  EXPECT_EQ(g[0], 3.0f);
  EXPECT_EQ(g[1], 4.0f);
  const std::vector<float> before = p;
  g[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(opt.step(p.data(), g.data(), 1e-3)));
  EXPECT_EQ(p, before);
  EXPECT_EQ(opt.steps_taken(), 1);
}

// Two shards (a data-parallel run's ranges) give the whole optimizer's bits: the norm from the
// shards' chunk sums added in order, each shard's update with its own moments.
TEST(AdamW, ShardsTakeTheWholeStepsBits) {
  ModelConfig c = model_preset("tiny", 512);
  ParamLayout layout(c);
  ASSERT_GT(layout.numel(), kAdamWChunk);
  AdamWConfig cfg;
  cfg.max_grad_norm = 0.5;  // clips: the norm must be exact
  std::vector<float> whole_p(static_cast<size_t>(layout.numel())), g(whole_p.size());
  for (size_t i = 0; i < g.size(); ++i) {
    whole_p[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = 0.01f * std::cos(1.3f * static_cast<float>(i));
  }
  std::vector<float> shard_p = whole_p, whole_g = g, shard_g = g;
  AdamW whole(layout, cfg);
  AdamW first(layout, cfg, {0, kAdamWChunk}), second(layout, cfg, {kAdamWChunk, layout.numel()});
  for (int step = 0; step < 3; ++step) {
    whole_g = g, shard_g = g;
    const double norm = whole.step(whole_p.data(), whole_g.data(), 1e-2);
    double sum = 0;
    for (const AdamW* o : {&first, &second})
      for (double x : o->grad_square_sums(shard_g.data())) sum += x;
    EXPECT_EQ(norm, first.step_with_norm(shard_p.data(), shard_g.data(), 1e-2, std::sqrt(sum)));
    second.step_with_norm(shard_p.data(), shard_g.data(), 1e-2, std::sqrt(sum));
    ASSERT_EQ(0, std::memcmp(whole_p.data(), shard_p.data(), whole_p.size() * sizeof(float))) << "step " << step;
  }
  EXPECT_EQ(first.first_moment().size(), static_cast<size_t>(kAdamWChunk));
}

TEST(LrSchedule, WarmupConstantAndCosine) {
  LrSchedule s;
  s.warmup_steps = 4;
  EXPECT_DOUBLE_EQ(s.lr_at(1.0, 0), 0.25);
  EXPECT_DOUBLE_EQ(s.lr_at(1.0, 3), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(1.0, 100), 1.0);
  s.kind = LrScheduleKind::kCosine;
  s.total_steps = 14;
  s.min_lr = 0.1;
  EXPECT_DOUBLE_EQ(s.lr_at(1.0, 4), 1.0);
  EXPECT_NEAR(s.lr_at(1.0, 9), 0.55, 1e-12);
  EXPECT_NEAR(s.lr_at(1.0, 14), 0.1, 1e-12);
  EXPECT_NEAR(s.lr_at(1.0, 50), 0.1, 1e-12);
}

}  // namespace
}  // namespace fp8rl
