// The MoE router and MLP block: routing by hand-worked values, gradients by finite differences,
// the FP32 forward against a direct double-precision evaluation of the definition, and the
// property that makes generator and trainer route alike: a token's routing and output do not
// depend on the other tokens of its batch, to the bit, under every precision policy.
// ctest-file-label: quick
#include "model/moe.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "model/moe_routing.h"
#include "numerics/bf16.h"
#include "tests/grad_check.h"

namespace fp8rl {
namespace {

std::vector<float> randn(int64_t n, float stddev, uint64_t stream) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, 0.0f, stddev, 11, stream);
  return v;
}

TEST(MoeRouting, SoftmaxTopKWithTiesToTheLowerExpert) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f};
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l));
  MoeRouting r;
  route_tokens(logits.data(), 1, 4, 3, /*norm_topk_prob=*/false, r);
  for (int e = 0; e < 4; ++e)
    EXPECT_NEAR(r.probs[static_cast<size_t>(e)], std::exp(static_cast<double>(logits[static_cast<size_t>(e)])) / z,
                1e-7);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 3, 2}));  // 1 and 3 tie: the lower first
  for (int j = 0; j < 3; ++j)
    EXPECT_EQ(r.weight[static_cast<size_t>(j)], r.probs[static_cast<size_t>(r.expert[static_cast<size_t>(j)])]);
  route_tokens(logits.data(), 1, 4, 2, /*norm_topk_prob=*/true, r);
  EXPECT_EQ(r.expert, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(r.weight, (std::vector<float>{0.5f, 0.5f}));
}

TEST(MoeRouting, ReplayTakesTheGivenExpertsAndKeepsTheRoutersChoice) {
  const int64_t N = 3, E = 5, k = 2;
  const std::vector<float> logits = randn(N * E, 1.0f, 4);
  MoeRouting own, replayed;
  route_tokens(logits.data(), N, E, k, /*norm_topk_prob=*/true, own);
  // Token 0 replays two other experts in an order of its own, token 1 the router's choice
  // reversed, token 2 nothing (-1: its own top k).
  std::vector<int32_t> others;  // token 0's experts outside its top k, highest index first
  for (int32_t e = E - 1; e >= 0; --e)
    if (e != own.expert[0] && e != own.expert[1]) others.push_back(e);
  const std::vector<int32_t> replay = {others[0], others[1], own.expert[3], own.expert[2], -1, -1};
  route_tokens(logits.data(), N, E, k, /*norm_topk_prob=*/true, replayed, replay.data());
  EXPECT_EQ(replayed.probs, own.probs);
  EXPECT_EQ(replayed.router_choice(), own.expert);
  EXPECT_EQ(std::vector<int32_t>(replayed.expert.begin(), replayed.expert.begin() + 4),
            std::vector<int32_t>(replay.begin(), replay.begin() + 4));
  EXPECT_EQ(std::vector<int32_t>(replayed.expert.begin() + 4, replayed.expert.end()),
            std::vector<int32_t>(own.expert.begin() + 4, own.expert.end()));
  for (int64_t n = 0; n < N; ++n) {
    const float* p = replayed.probs.data() + n * E;
    const int32_t* ex = replayed.expert.data() + n * k;
    const float s = p[ex[0]] + p[ex[1]];
    for (int64_t j = 0; j < k; ++j) EXPECT_EQ(replayed.weight[static_cast<size_t>(n * k + j)], p[ex[j]] / s);
  }
  // A record that names an expert twice, or one out of range, is refused with the token and slot.
  for (const std::vector<int32_t>& bad :
       {std::vector<int32_t>{1, 1, -1, -1, -1, -1}, std::vector<int32_t>{-1, -1, 0, static_cast<int32_t>(E), -1, -1}}) {
    try {
      route_tokens(logits.data(), N, E, k, true, replayed, bad.data());
      ADD_FAILURE() << "a bad replay record was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("router replay: token"), std::string::npos) << e.what();
    }
  }
}

TEST(MoeRouting, GroupsPairsByExpertWithTokensAscending) {
  MoeRouting r;
  r.N = 3, r.E = 3, r.k = 2;
  r.expert = {2, 0, 0, 2, 2, 1};  // token 0: 2, 0; token 1: 0, 2; token 2: 2, 1
  ExpertGroups g;
  group_by_expert(r, g);
  EXPECT_EQ(g.begin, (std::vector<int64_t>{0, 2, 3, 6}));
  EXPECT_EQ(g.token, (std::vector<int32_t>{0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(g.slot, (std::vector<int32_t>{1, 0, 1, 0, 1, 0}));
  for (int64_t i = 0; i < 6; ++i) {
    const int32_t row = g.row_of[static_cast<size_t>(i)];
    EXPECT_EQ(g.token[static_cast<size_t>(row)], i / 2);
    EXPECT_EQ(g.slot[static_cast<size_t>(row)], i % 2);
  }
}

TEST(MoeRouting, BackwardMatchesFiniteDifferences) {
  const int64_t N = 4, E = 6, k = 3;
  std::vector<float> logits = randn(N * E, 1.0f, 1);
  const std::vector<float> dweight = randn(N * k, 1.0f, 2);
  for (bool norm : {false, true}) {
    MoeRouting r;
    route_tokens(logits.data(), N, E, k, norm, r);
    const std::vector<int32_t> chosen = r.expert;
    std::vector<float> dlogits(static_cast<size_t>(N * E));
    route_backward(dlogits.data(), dweight.data(), r);
    auto loss = [&] {
      MoeRouting p;
      route_tokens(logits.data(), N, E, k, norm, p);
      EXPECT_EQ(p.expert, chosen) << "a step of the check changed the experts";
      double s = 0.0;
      for (size_t i = 0; i < p.weight.size(); ++i) s += static_cast<double>(dweight[i]) * p.weight[i];
      return s;
    };
    testing::expect_gradient_matches(norm ? "normalized" : "plain", logits.data(), N * E, dlogits.data(), loss, 1e-2,
                                     2e-4, 1e-2);
  }
}

// One MoE layer's masters, and pointers into them.
struct MoeParams {
  MoeParams(const MoeShape& s, float stddev, uint64_t stream) {
    const int64_t C = s.d_model, F = s.d_expert;
    router = randn(s.num_experts * C, stddev, stream);
    for (int64_t e = 0; e < s.num_experts; ++e) {
      gate.push_back(randn(F * C, stddev, stream + 100 + static_cast<uint64_t>(3 * e)));
      up.push_back(randn(F * C, stddev, stream + 101 + static_cast<uint64_t>(3 * e)));
      down.push_back(randn(C * F, stddev, stream + 102 + static_cast<uint64_t>(3 * e)));
    }
  }
  static MoeParams zeros_like(const MoeParams& p) {
    MoeParams z = p;
    for (auto* list : {&z.gate, &z.up, &z.down})
      for (auto& v : *list) std::fill(v.begin(), v.end(), 0.0f);
    std::fill(z.router.begin(), z.router.end(), 0.0f);
    return z;
  }
  MoeWeights pointers() {
    MoeWeights w;
    w.router = router.data();
    for (size_t e = 0; e < gate.size(); ++e) {
      w.gate.push_back(gate[e].data());
      w.up.push_back(up[e].data());
      w.down.push_back(down[e].data());
    }
    return w;
  }
  std::vector<float> router;
  std::vector<std::vector<float>> gate, up, down;
};

// The definition evaluated directly in double precision for one token (top k by the FP32 routing,
// so that both pick the same experts).
std::vector<double> reference_token(const MoeShape& s, MoeParams& p, const float* h) {
  const int64_t C = s.d_model, F = s.d_expert, E = s.num_experts, k = s.top_k;
  std::vector<float> logits(static_cast<size_t>(E));
  std::vector<double> ld(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    double acc = 0.0;
    for (int64_t c = 0; c < C; ++c) acc += static_cast<double>(p.router[static_cast<size_t>(e * C + c)]) * h[c];
    ld[static_cast<size_t>(e)] = acc;
    logits[static_cast<size_t>(e)] = static_cast<float>(acc);
  }
  MoeRouting r;
  route_tokens(logits.data(), 1, E, k, s.norm_topk_prob, r);
  const double m = *std::max_element(ld.begin(), ld.end());
  double z = 0.0;
  for (double l : ld) z += std::exp(l - m);
  double chosen = 0.0;
  for (int64_t j = 0; j < k; ++j) chosen += std::exp(ld[static_cast<size_t>(r.expert[static_cast<size_t>(j)])] - m) / z;
  std::vector<double> y(static_cast<size_t>(C), 0.0);
  for (int64_t j = 0; j < k; ++j) {
    const size_t e = static_cast<size_t>(r.expert[static_cast<size_t>(j)]);
    double w = std::exp(ld[e] - m) / z;
    if (s.norm_topk_prob) w /= chosen;
    std::vector<double> act(static_cast<size_t>(F));
    for (int64_t f = 0; f < F; ++f) {
      double g = 0.0, u = 0.0;
      for (int64_t c = 0; c < C; ++c) {
        g += static_cast<double>(p.gate[e][static_cast<size_t>(f * C + c)]) * h[c];
        u += static_cast<double>(p.up[e][static_cast<size_t>(f * C + c)]) * h[c];
      }
      act[static_cast<size_t>(f)] = g / (1.0 + std::exp(-g)) * u;
    }
    for (int64_t c = 0; c < C; ++c) {
      double o = 0.0;
      for (int64_t f = 0; f < F; ++f)
        o += static_cast<double>(p.down[e][static_cast<size_t>(c * F + f)]) * act[static_cast<size_t>(f)];
      y[static_cast<size_t>(c)] += w * o;
    }
  }
  return y;
}

TEST(MoeMlp, Fp32ForwardMatchesTheDefinition) {
  const MoeShape shape{/*d_model=*/48, /*d_expert=*/32, /*num_experts=*/8, /*top_k=*/2, /*norm_topk_prob=*/true};
  for (bool norm : {true, false}) {
    MoeShape s = shape;
    s.norm_topk_prob = norm;
    MoeParams p(s, 0.2f, 1);
    MoeMlp moe(0, 1, s, PrecisionPolicy::fp32());
    moe.refresh_weights(p.pointers());
    const int64_t N = 9;
    const std::vector<float> h = randn(N * s.d_model, 1.0f, 7);
    std::vector<float> y(static_cast<size_t>(N * s.d_model));
    MoeActs acts;
    moe.forward(y.data(), h.data(), N, acts);
    for (int64_t n = 0; n < N; ++n) {
      const std::vector<double> ref = reference_token(s, p, h.data() + n * s.d_model);
      for (int64_t c = 0; c < s.d_model; ++c)
        ASSERT_NEAR(y[static_cast<size_t>(n * s.d_model + c)], ref[static_cast<size_t>(c)],
                    1e-5 + 1e-4 * std::fabs(ref[static_cast<size_t>(c)]))
            << "token " << n << " channel " << c << (norm ? " (normalized)" : "");
    }
  }
}

// The gradients of every input of the block against finite differences; with `replay`, of the
// block forced to those experts (the router's gradient then flows through the replayed weights).
void check_gradients_against_finite_differences(const std::vector<int32_t>& replay) {
  const MoeShape s{/*d_model=*/16, /*d_expert=*/12, /*num_experts=*/5, /*top_k=*/2, /*norm_topk_prob=*/true};
  MoeParams p(s, 0.4f, 3);
  MoeParams grads = MoeParams::zeros_like(p);
  MoeMlp moe(0, 1, s, PrecisionPolicy::fp32());
  const int64_t N = 6;
  const int32_t* forced = replay.empty() ? nullptr : replay.data();
  std::vector<float> h = randn(N * s.d_model, 1.0f, 9);
  const std::vector<float> dy = randn(N * s.d_model, 1.0f, 10);
  moe.refresh_weights(p.pointers());
  std::vector<float> y(h.size()), dh(h.size());
  MoeActs acts;
  moe.forward(y.data(), h.data(), N, acts, /*save_for_backward=*/true, forced);
  const std::vector<int32_t> chosen = acts.routing.expert;
  MoeGradScratch scratch;
  moe.backward(dh.data(), /*accumulate_dh=*/false, dy.data(), acts, grads.pointers(), scratch);
  auto loss = [&] {
    MoeActs a;
    std::vector<float> out(h.size());
    moe.forward(out.data(), h.data(), N, a, /*save_for_backward=*/false, forced);
    EXPECT_EQ(a.routing.expert, chosen) << "a step of the check changed the experts";
    double l = 0.0;
    for (size_t i = 0; i < out.size(); ++i) l += static_cast<double>(dy[i]) * out[i];
    return l;
  };
  const double step = 1e-2, abs_tol = 2e-3, rel_tol = 1e-2;
  testing::expect_gradient_matches("dh", h.data(), N * s.d_model, dh.data(), loss, step, abs_tol, rel_tol);
  testing::expect_gradient_matches("router", p.router.data(), static_cast<int64_t>(p.router.size()),
                                   grads.router.data(), loss, step, abs_tol, rel_tol);
  for (size_t e = 0; e < p.gate.size(); ++e) {
    const int64_t n = s.d_model * s.d_expert;
    testing::expect_gradient_matches("gate " + std::to_string(e), p.gate[e].data(), n, grads.gate[e].data(), loss, step,
                                     abs_tol, rel_tol, 7);
    testing::expect_gradient_matches("up " + std::to_string(e), p.up[e].data(), n, grads.up[e].data(), loss, step,
                                     abs_tol, rel_tol, 7);
    testing::expect_gradient_matches("down " + std::to_string(e), p.down[e].data(), n, grads.down[e].data(), loss, step,
                                     abs_tol, rel_tol, 7);
  }
}

TEST(MoeMlp, Fp32GradientsMatchFiniteDifferences) { check_gradients_against_finite_differences({}); }

TEST(MoeMlp, Fp32GradientsWithReplayedExpertsMatchFiniteDifferences) {
  // Six tokens of top 2 of 5: every expert replayed somewhere, one token left to its router.
  check_gradients_against_finite_differences({4, 3, 0, 1, -1, -1, 2, 0, 1, 4, 3, 2});
}

PrecisionPolicy policy_with_linears(Precision linear) {
  PrecisionPolicy p;
  p.linear = linear;
  return p;
}

// The generator runs a token in batches of other sizes and company than the trainer does: its
// experts and output must not change, to the bit.
TEST(MoeMlp, ATokensRoutingAndOutputDoNotDependOnItsBatch) {
  const MoeShape s{/*d_model=*/256, /*d_expert=*/128, /*num_experts=*/8, /*top_k=*/2, /*norm_topk_prob=*/true};
  MoeParams p(s, 0.05f, 5);
  const int64_t N = 37, C = s.d_model;
  std::vector<float> h = randn(N * C, 1.0f, 21);
  for (Precision linear : {Precision::kF32, Precision::kBF16, Precision::kFP8}) {
    PrecisionPolicy policy = linear == Precision::kF32 ? PrecisionPolicy::fp32() : policy_with_linears(linear);
    if (policy.activations == Precision::kBF16)
      for (float& v : h) v = bf16_to_f32(f32_to_bf16(v));  // the normed input is BF16-valued there
    MoeMlp moe(0, 1, s, policy);
    moe.refresh_weights(p.pointers());
    std::vector<float> y(static_cast<size_t>(N * C));
    MoeActs all;
    moe.forward(y.data(), h.data(), N, all, /*save_for_backward=*/false);
    // Each token alone, and the tokens in reverse order.
    std::vector<float> h_rev(h.size());
    for (int64_t n = 0; n < N; ++n) std::memcpy(h_rev.data() + n * C, h.data() + (N - 1 - n) * C, sizeof(float) * C);
    std::vector<float> y_rev(y.size());
    MoeActs rev;
    moe.forward(y_rev.data(), h_rev.data(), N, rev, /*save_for_backward=*/false);
    for (int64_t n = 0; n < N; ++n) {
      std::vector<float> y1(static_cast<size_t>(C));
      MoeActs one;
      moe.forward(y1.data(), h.data() + n * C, 1, one, /*save_for_backward=*/false);
      for (int64_t j = 0; j < s.top_k; ++j) {
        EXPECT_EQ(one.routing.expert[static_cast<size_t>(j)], all.routing.expert[static_cast<size_t>(n * s.top_k + j)]);
        EXPECT_EQ(rev.routing.expert[static_cast<size_t>((N - 1 - n) * s.top_k + j)],
                  all.routing.expert[static_cast<size_t>(n * s.top_k + j)]);
      }
      EXPECT_EQ(std::memcmp(y1.data(), y.data() + n * C, sizeof(float) * C), 0)
          << precision_name(linear) << ": token " << n << " alone";
      EXPECT_EQ(std::memcmp(y_rev.data() + (N - 1 - n) * C, y.data() + n * C, sizeof(float) * C), 0)
          << precision_name(linear) << ": token " << n << " in reverse order";
    }
    // The experts are used unevenly, some by several tokens: the check is not vacuous.
    int64_t busiest = 0;
    for (int64_t e = 0; e < s.num_experts; ++e)
      busiest =
          std::max(busiest, all.groups.begin[static_cast<size_t>(e + 1)] - all.groups.begin[static_cast<size_t>(e)]);
    EXPECT_GT(busiest, 4);
  }
}

}  // namespace
}  // namespace fp8rl
