// The MoE load-balancing loss (model/moe_load_balance.h) and the frozen router: the loss's value by
// hand (uniform routing gives k; padding is not counted), its gradient through the whole model
// against finite differences, and a frozen router that receives no gradient and no update while
// every other gradient keeps its bits.
// ctest-file-label: quick
#include "model/moe_load_balance.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "arch/config.h"
#include "model/moe_routing.h"
#include "model/optimizer.h"
#include "model/transformer.h"

namespace fp8rl {
namespace {

TEST(LoadBalance, UniformRoutingGivesKAndPaddingIsNotCounted) {
  // Equal logits: p = 1/E everywhere, whatever the experts; the loss is k.
  const int64_t N = 5, E = 4, k = 2;
  std::vector<float> logits(N * E, 0.25f);
  MoeRouting r;
  route_tokens(logits.data(), N, E, k, /*norm_topk_prob=*/true, r);
  LoadBalanceStats stats;
  stats.add_layer(r, nullptr);
  stats.add_layer(r, nullptr);
  EXPECT_EQ(stats.decisions(), 2 * N);
  EXPECT_NEAR(stats.loss(), static_cast<double>(k), 1e-12);

  // By hand, top 1 of 2 experts over two real tokens and one padding row: token 0 p = (0.8, 0.2)
  // to expert 0, token 1 p = (0.4, 0.6) to expert 1. f = (1/2, 1/2), P = (0.6, 0.4):
  // aux = 2 (0.5 * 0.6 + 0.5 * 0.4) = 1.
  const float l0 = std::log(0.8f / 0.2f), l1 = std::log(0.4f / 0.6f);
  std::vector<float> two = {l0, 0.0f, l1, 0.0f, 9.0f, 0.0f};
  route_tokens(two.data(), 3, 2, 1, /*norm_topk_prob=*/false, r);
  const uint8_t real[3] = {1, 1, 0};
  stats.reset();
  stats.add_layer(r, real);
  EXPECT_EQ(stats.decisions(), 2);
  EXPECT_NEAR(stats.loss(), 1.0, 1e-6);
  // d aux / d p_e = E f_e / (L N) = 2 * 0.5 / 2 at each counted row, times the weight.
  const std::vector<float> g = stats.dprobs(3.0);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_NEAR(g[0], 1.5f, 1e-6);
  EXPECT_NEAR(g[1], 1.5f, 1e-6);
}

// tiny-moe in FP32 at a small vocabulary and a right-padded batch of two sequences.
Transformer fp32_moe_model() {
  PrecisionPolicy policy;
  policy.activations = Precision::kF32;
  policy.linear = Precision::kF32;
  Transformer model(model_preset("tiny-moe", 40), policy);
  model.init_random(5);
  return model;
}

TokenBatch padded_batch() {
  TokenBatch b = TokenBatch::empty(2, 6, 0);
  const std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 12, 3, 30}, {1, 7, 22, 8}};
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (size_t t = 0; t < seqs[s].size(); ++t) {
      b.tokens[s * 6 + t] = seqs[s][t];
      if (t + 1 < seqs[s].size()) b.targets[s * 6 + t] = seqs[s][t + 1];
    }
    b.lengths[s] = static_cast<int32_t>(seqs[s].size());
  }
  return b;
}

// The aux loss's gradient (backward with zero log-prob gradients and weight 1) against central
// differences of moe_aux_loss(), at elements of the routers (directly) and of the layers below
// them (through the MoE layers' inputs), where the perturbation leaves every expert choice as it
// is (the count term is piecewise constant).
TEST(LoadBalance, GradientThroughTheModelMatchesFiniteDifferences) {
  Transformer model = fp32_moe_model();
  const TokenBatch batch = padded_batch();
  const size_t N = static_cast<size_t>(batch.B * batch.T);
  std::vector<float> lp(N), zero(N, 0.0f);
  model.zero_grads();
  model.forward(batch, lp.data());
  const double aux = model.moe_aux_loss();
  EXPECT_GT(aux, 1.0);  // k = 2 at uniform; random routers are not
  const std::vector<std::vector<int32_t>> routing = model.last_routing();
  model.backward(zero.data(), nullptr, /*aux_loss_weight=*/1.0);
  int checked = 0;
  for (const char* name : {"model.layers.0.mlp.gate.weight", "model.layers.1.mlp.gate.weight",
                           "model.layers.0.self_attn.v_proj.weight", "model.layers.1.self_attn.o_proj.weight"}) {
    const ParamInfo& t = model.layout().find(name);
    for (int64_t i = 0; i < t.shape.numel(); i += t.shape.numel() / 23 + 1) {
      float* p = model.params() + t.offset + i;
      const float g = model.grads()[t.offset + i], saved = *p, h = 1e-2f;
      double f[2];
      bool same_routing = true;
      for (int s = 0; s < 2; ++s) {
        *p = saved + (s == 0 ? h : -h);
        model.refresh_weights();
        model.forward(batch, lp.data(), /*for_backward=*/false);
        f[s] = model.moe_aux_loss();
        same_routing = same_routing && model.last_routing() == routing;
      }
      *p = saved;
      model.refresh_weights();
      if (!same_routing) continue;
      const double fd = (f[0] - f[1]) / (2.0 * h);
      EXPECT_NEAR(g, fd, 2e-3 + 2e-2 * std::fabs(fd)) << name << "[" << i << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 60);
}

// A frozen router: its gradient stays zero, every other gradient has the bits of the unfrozen
// backward, and AdamW::freeze leaves its weights as they are while the rest moves.
TEST(FreezeRouter, NoGradientNoUpdateAndTheOtherGradientsUnchanged) {
  const TokenBatch batch = padded_batch();
  const size_t N = static_cast<size_t>(batch.B * batch.T);
  std::vector<float> lp(N), dlp(N);
  for (size_t n = 0; n < N; ++n) dlp[n] = batch.targets[n] >= 0 ? -0.1f : 0.0f;
  std::vector<std::vector<float>> grads;
  for (bool frozen : {false, true}) {
    Transformer model = fp32_moe_model();
    model.set_router_frozen(frozen);
    model.zero_grads();
    model.forward(batch, lp.data());
    model.backward(dlp.data());
    grads.emplace_back(model.grads(), model.grads() + model.num_params());
    if (!frozen) continue;
    AdamW adam(model.layout(), AdamWConfig{});
    adam.freeze([&](const ParamInfo& t) { return !model.trains(t); });
    const std::vector<float> before(model.params(), model.params() + model.num_params());
    adam.step(model.params(), model.grads(), 1e-2);
    for (const ParamInfo& t : model.layout().tensors()) {
      const bool router = t.name.ends_with(".mlp.gate.weight");
      EXPECT_EQ(model.trains(t), !router) << t.name;
      const std::vector<float> b(before.begin() + t.offset, before.begin() + t.offset + t.shape.numel());
      const std::vector<float> a(model.params() + t.offset, model.params() + t.offset + t.shape.numel());
      if (router) {
        EXPECT_EQ(a, b) << t.name;
      } else if (t.name == "model.layers.0.mlp.experts.0.down_proj.weight") {
        EXPECT_NE(a, b) << t.name;
      }
    }
  }
  const Transformer model = fp32_moe_model();
  for (const ParamInfo& t : model.layout().tensors()) {
    const auto slice = [&](const std::vector<float>& g) {
      return std::vector<float>(g.begin() + t.offset, g.begin() + t.offset + t.shape.numel());
    };
    if (t.name.ends_with(".mlp.gate.weight")) {
      EXPECT_EQ(slice(grads[1]), std::vector<float>(static_cast<size_t>(t.shape.numel()), 0.0f)) << t.name;
      EXPECT_NE(slice(grads[0]), slice(grads[1])) << t.name;
    } else {
      EXPECT_EQ(slice(grads[1]), slice(grads[0])) << t.name;
    }
  }
}

}  // namespace
}  // namespace fp8rl
