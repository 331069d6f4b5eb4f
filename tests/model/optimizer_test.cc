// AdamW against a hand-computed update; clipping; schedules; non-finite gradients; shards and
// offloaded moments against the whole optimizer in memory.
// ctest-file-label: quick
#include "model/optimizer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "tests/test_temp_dir.h"

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
  EXPECT_EQ(first.end() - first.begin(), kAdamWChunk);
}

// Moments offloaded to a spill file (policy.optimizer.offload_moments), whole or as shards: the
// in-memory optimizer's parameters and moments, bit for bit, over steps that clip.
TEST(AdamW, OffloadedMomentsGiveTheSameBits) {
  ModelConfig c = model_preset("tiny", 512);
  ParamLayout layout(c);
  AdamWConfig cfg;
  cfg.max_grad_norm = 0.5;
  const int64_t n = layout.numel();
  std::vector<float> p(static_cast<size_t>(n)), g(p.size());
  for (size_t i = 0; i < g.size(); ++i) {
    p[i] = std::sin(0.37f * static_cast<float>(i));
    g[i] = 0.01f * std::cos(1.3f * static_cast<float>(i));
  }
  std::vector<float> offloaded_p = p, shard_p = p;
  const testing::TempDir tmp;
  AdamW memory(layout, cfg), offloaded(layout, cfg, {}, tmp.path());
  AdamW first(layout, cfg, {0, kAdamWChunk}, tmp.path()), second(layout, cfg, {kAdamWChunk, n}, tmp.path());
  EXPECT_FALSE(memory.moments_offloaded());
  EXPECT_TRUE(offloaded.moments_offloaded());
  for (int step = 0; step < 3; ++step) {
    const double norm = memory.step(p.data(), g.data(), 1e-2);
    EXPECT_EQ(norm, offloaded.step(offloaded_p.data(), g.data(), 1e-2));
    first.step_with_norm(shard_p.data(), g.data(), 1e-2, norm);
    second.step_with_norm(shard_p.data(), g.data(), 1e-2, norm);
    ASSERT_EQ(0, std::memcmp(p.data(), offloaded_p.data(), p.size() * sizeof(float))) << "step " << step;
    ASSERT_EQ(0, std::memcmp(p.data(), shard_p.data(), p.size() * sizeof(float))) << "step " << step;
  }
  for (const Moment moment : {Moment::kFirst, Moment::kSecond}) {
    std::vector<float> expected(static_cast<size_t>(n)), got(expected.size()), shards(expected.size());
    memory.read_moment(moment, 0, n, expected.data());
    offloaded.read_moment(moment, 0, n, got.data());
    first.read_moment(moment, 0, kAdamWChunk, shards.data());
    second.read_moment(moment, kAdamWChunk, n - kAdamWChunk, shards.data() + kAdamWChunk);
    EXPECT_EQ(0, std::memcmp(expected.data(), got.data(), got.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(expected.data(), shards.data(), got.size() * sizeof(float)));
    EXPECT_NE(expected[7], 0.0f);
  }
  // Written moments are read back, in memory and offloaded alike.
  const std::vector<float> values = {1.5f, -2.0f, 3.25f};
  for (AdamW* o : {&memory, &offloaded}) {
    std::vector<float> back(values.size());
    o->write_moment(Moment::kSecond, n - 3, 3, values.data());
    o->read_moment(Moment::kSecond, n - 3, 3, back.data());
    EXPECT_EQ(values, back);
  }
  EXPECT_THROW(offloaded.read_moment(Moment::kFirst, n - 1, 2, p.data()), Error);
}

// optimizer.safetensors read into shards (data-parallel ranks) in memory and offloaded, where a
// shard starts inside a row of a tensor (hidden size 96: 65,536 is no multiple of it).
TEST(AdamW, StateLoadsIntoShardsThatStartInsideARow) {
  ModelConfig c = model_preset("tiny", 1000);
  c.d_model = 96;
  c.validate();
  ParamLayout layout(c);
  const int64_t n = layout.numel();
  ASSERT_GT(n, kAdamWChunk);
  const auto inside = std::find_if(layout.tensors().begin(), layout.tensors().end(), [](const ParamInfo& p) {
    return p.offset < kAdamWChunk && kAdamWChunk < p.offset + p.shape.numel();
  });
  ASSERT_NE(inside, layout.tensors().end());
  ASSERT_NE((kAdamWChunk - inside->offset) % (inside->shape.numel() / inside->shape[0]), 0);
  std::vector<float> m(static_cast<size_t>(n)), v(m.size());
  for (size_t i = 0; i < m.size(); ++i) m[i] = 0.5f * static_cast<float>(i), v[i] = -static_cast<float>(i);
  const testing::TempDir tmp;
  SafetensorsWriter state;
  for (const ParamInfo& p : layout.tensors()) {
    state.add("exp_avg." + p.name, TensorView::contiguous(m.data() + p.offset, DType::kF32, p.shape));
    state.add("exp_avg_sq." + p.name, TensorView::contiguous(v.data() + p.offset, DType::kF32, p.shape));
  }
  state.set_metadata("step", "3");
  state.write(tmp / "optimizer.safetensors");
  for (const bool offloaded : {false, true}) {
    const std::filesystem::path spill = offloaded ? tmp.path() : std::filesystem::path();
    AdamW first(layout, AdamWConfig{}, {0, kAdamWChunk}, spill), second(layout, AdamWConfig{}, {kAdamWChunk, n}, spill);
    std::vector<float> got_m(m.size()), got_v(m.size());
    for (AdamW* shard : {&first, &second}) {
      load_optimizer_state(tmp.path(), *shard);
      EXPECT_EQ(shard->steps_taken(), 3);
      const int64_t b = shard->begin(), e = shard->end();
      shard->read_moment(Moment::kFirst, b, e - b, got_m.data() + b);
      shard->read_moment(Moment::kSecond, b, e - b, got_v.data() + b);
    }
    EXPECT_EQ(got_m, m) << "offloaded " << offloaded;
    EXPECT_EQ(got_v, v) << "offloaded " << offloaded;
  }
}

TEST(AdamW, OffloadingToAMissingDirectoryNamesIt) {
  ModelConfig c = model_preset("tiny", 8);
  ParamLayout layout(c);
  try {
    AdamW opt(layout, AdamWConfig{}, {}, "/nonexistent/spill-here");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/spill-here"), std::string::npos) << e.what();
  }
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
