// GRPO advantages and loss: finite-difference gradient checks of every variant, micro-batch
// additivity, the clipped term's branch semantics, non-finite generator log-probs, and bad input.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "rl/advantages.h"
#include "rl/grpo_loss.h"

namespace fp8rl {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Expects `f` to throw fp8rl::Error whose message contains `needle`.
template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no fp8rl::Error; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "message: " << e.what();
  }
}

// ------------------------------------------------------------------------------------------------
// Advantages
// ------------------------------------------------------------------------------------------------

TEST(Advantages, LeaveOneOutNormalisedByHand) {
  // Group {1, 2, 4}: response 0 has others {2, 4}: b = 3, population std 1 -> (1-3)/(1+1e-6).
  const std::vector<float> a = compute_advantages(std::vector<float>{1, 2, 4}, 3, AdvantageConfig{});
  EXPECT_FLOAT_EQ(a[0], static_cast<float>(-2.0 / (1.0 + 1e-6)));
  EXPECT_FLOAT_EQ(a[1], static_cast<float>((2 - 2.5) / (1.5 + 1e-6)));
  EXPECT_FLOAT_EQ(a[2], static_cast<float>((4 - 1.5) / (0.5 + 1e-6)));
  // Plain group mean 7/3 and population std sqrt(14/9).
  const std::vector<float> b = compute_advantages(std::vector<float>{1, 2, 4}, 3, {false, true});
  EXPECT_FLOAT_EQ(b[0], static_cast<float>((1 - 7.0 / 3) / (std::sqrt(14.0 / 9) + 1e-6)));
  const std::vector<float> c = compute_advantages(std::vector<float>{1, 2, 4}, 3, {true, false});
  EXPECT_FLOAT_EQ(c[2], 2.5f);
}

TEST(Advantages, AllEqualGroupsAndSingleResponsesGetZero) {
  for (bool loo : {true, false})
    for (bool norm : {true, false}) {
      // 0.1f three times: a computed mean or std could round to a 1e-17 difference; the rule is exact.
      const std::vector<float> r = {0.1f, 0.1f, 0.1f, 1, 1, 1, 0, 0, 0};
      for (float v : compute_advantages(r, 3, {loo, norm})) EXPECT_EQ(v, 0.0f);
      for (float v : compute_advantages(std::vector<float>{0.3f, 1, -2}, 1, {loo, norm})) EXPECT_EQ(v, 0.0f);
    }
}

TEST(Advantages, ConstantOthersDoNotDivideByEpsilon) {
  // The lone correct response of {1, 0, 0, 0}: its other rewards have std 0; it keeps 1 - 0
  // instead of (1 - 0) / 1e-6.
  const std::vector<float> a = compute_advantages(std::vector<float>{1, 0, 0, 0}, 4, AdvantageConfig{});
  EXPECT_EQ(a[0], 1.0f);
  for (int i = 1; i < 4; ++i) EXPECT_NEAR(a[i], -(1.0 / 3) / (std::sqrt(2.0) / 3 + 1e-6), 1e-6);
  // G = 2 with leave-one-out: every response's other set is a single reward: A = r_i - r_j.
  const std::vector<float> b = compute_advantages(std::vector<float>{1, 0.25f}, 2, AdvantageConfig{});
  EXPECT_EQ(b[0], 0.75f);
  EXPECT_EQ(b[1], -0.75f);
}

TEST(Advantages, BadInputIsAClearError) {
  const std::vector<float> r = {1, 0, 1, 0, 1};
  expect_error([&] { compute_advantages(r, 2, {}); }, "do not split into groups of 2");
  expect_error([&] { compute_advantages(r, 0, {}); }, "group_size");
  std::vector<float> out(3);
  expect_error([&] { compute_advantages(r, 5, {}, out); }, "output of 3");
  expect_error([&] { compute_advantages(std::vector<float>{1, kNaN}, 2, {}); }, "reward 1");
}

// ------------------------------------------------------------------------------------------------
// Loss: a batch built away from every kink, so finite differences are valid
// ------------------------------------------------------------------------------------------------

struct Batch {
  std::vector<float> curr, prev, gen, ref, advantages;
  std::vector<int64_t> offsets;
  int64_t global_tokens = 0, global_sequences = 0;
  GrpoLossBatch view() const { return {curr, prev, gen, ref, advantages, offsets, global_tokens, global_sequences}; }
  size_t tokens() const { return curr.size(); }
};

// 14 sequences of 1..6 tokens. Per sequence, curr - prev = a base log-ratio + jitter in +-0.01,
// with bases chosen >= 0.04 away from the clip boundaries log(0.8), log(1.2), log(0.9), log(1.28)
// (also for the sequence mean), so no finite-difference step crosses a kink. ref - curr in [-2, 2]
// except two tokens whose KL input clamp (+-25) is active.
Batch make_batch(uint64_t seed) {
  static const double kBases[] = {-0.5, -0.3, -0.16, 0.0, 0.06, 0.13, 0.35};
  RandomStream rng(seed, 0);
  auto uniform = [&](double lo, double hi) { return lo + (hi - lo) * (rng.next_u32() / 4294967296.0); };
  Batch b;
  b.offsets = {0};
  for (int s = 0; s < 14; ++s) {
    const int len = 1 + s % 6;
    const double base = kBases[(s * 3) % 7];
    for (int i = 0; i < len; ++i) {
      const double prev = -uniform(0.05, 3.0);
      b.prev.push_back(static_cast<float>(prev));
      b.curr.push_back(static_cast<float>(prev + base + uniform(-0.01, 0.01)));
      b.gen.push_back(static_cast<float>(prev - uniform(-0.6, 0.6)));
      b.ref.push_back(static_cast<float>(b.curr.back() + uniform(-2.0, 2.0)));
    }
    b.offsets.push_back(static_cast<int64_t>(b.curr.size()));
    b.advantages.push_back(static_cast<float>(s % 5 == 2 ? 0.0 : uniform(-2.0, 2.0)));
  }
  b.ref[3] = b.curr[3] + 25.0f;
  b.ref[20] = b.curr[20] - 25.0f;
  b.global_tokens = static_cast<int64_t>(b.curr.size()) + 9;
  b.global_sequences = 14 + 3;
  return b;
}

std::vector<std::pair<std::string, GrpoLossConfig>> all_variants() {
  std::vector<std::pair<std::string, GrpoLossConfig>> v;
  for (bool seq_level : {false, true})
    for (bool token_level : {true, false})
      for (int is = 0; is < 5; ++is)
        for (KlType kl : {KlType::kK1, KlType::kK2, KlType::kK3}) {
          GrpoLossConfig c;
          c.sequence_level_importance_ratios = seq_level;
          c.token_level_loss = token_level;
          c.reference_policy_kl_type = kl;
          c.reference_policy_kl_penalty = 0.1;
          if (is == 4) {
            c.ratio_clip_min = 0.1;
            c.ratio_clip_max = 0.28;
          }
          if (is >= 1) c.use_importance_sampling_correction = true;
          if (is >= 2 && is <= 4) {
            c.truncated_importance_sampling_ratio = 1.3;
            c.truncated_importance_sampling_ratio_min = 0.8;
            c.truncated_importance_sampling_type = is == 2 ? TruncatedIsType::kTis
                                                   : is == 3 ? TruncatedIsType::kIcepop
                                                             : TruncatedIsType::kSeqMaskTis;
          }
          if (seq_level && c.truncated_importance_sampling_type == TruncatedIsType::kSeqMaskTis) continue;
          v.emplace_back(std::string(seq_level ? "seq-ratio" : "token-ratio") + (token_level ? "/token-mean" : "/seq-mean") +
                             "/is" + std::to_string(is) + "/" + std::string(to_string(kl)),
                         c);
        }
  return v;
}

TEST(GrpoLoss, GradientMatchesFiniteDifferencesForEveryVariant) {
  Batch b = make_batch(11);
  const float h = 1.0f / 4096;  // |curr| < 8, so curr +- h is exact in float
  for (const auto& [name, config] : all_variants()) {
    SCOPED_TRACE(name);
    std::vector<float> grad(b.tokens()), scratch(b.tokens());
    grpo_loss(config, b.view(), grad);
    double worst = 0;
    size_t worst_t = 0;
    double worst_num = 0;
    for (size_t t = 0; t < b.tokens(); ++t) {
      const float saved = b.curr[t];
      b.curr[t] = saved + h;
      const double up = grpo_loss(config, b.view(), scratch).loss;
      b.curr[t] = saved - h;
      const double down = grpo_loss(config, b.view(), scratch).loss;
      b.curr[t] = saved;
      const double numeric = (up - down) / (2.0 * h);
      // Central difference error ~ h^2/6 |l'''| <= 1e-8 relative here; float output 6e-8.
      const double excess = std::fabs(numeric - grad[t]) - (1e-9 + 1e-6 * std::fabs(numeric));
      if (excess > worst) worst = excess, worst_t = t, worst_num = numeric;
    }
    EXPECT_LE(worst, 0.0) << "token " << worst_t << ": numeric " << worst_num << " analytic " << grad[worst_t];
  }
}

// On policy (curr == prev == gen) and beta = 0, the loss is -mean A and d/dcurr = -A / N.
TEST(GrpoLoss, OnPolicyReducesToPolicyGradient) {
  const std::vector<float> lp = {-0.5f, -1.0f, -0.25f};
  const std::vector<float> adv = {2.0f, -1.0f};
  const std::vector<int64_t> off = {0, 1, 3};
  GrpoLossConfig c;
  c.reference_policy_kl_penalty = 0;
  c.use_importance_sampling_correction = true;
  std::vector<float> grad(3);
  const GrpoLossResult r = grpo_loss(c, {lp, lp, lp, {}, adv, off, 3, 2}, grad);
  EXPECT_DOUBLE_EQ(r.loss, -(2.0 - 1.0 - 1.0) / 3);
  EXPECT_FLOAT_EQ(grad[0], -2.0f / 3);
  EXPECT_FLOAT_EQ(grad[1], 1.0f / 3);
  const GrpoMetrics m = r.sums.finalize();
  EXPECT_EQ(m.token_mult_prob_error, 1.0);
  EXPECT_EQ(m.gen_kl_error, 0.0);
  EXPECT_EQ(m.js_divergence_error, 0.0);
  EXPECT_EQ(m.sampling_importance_ratio, 1.0);
  EXPECT_EQ(m.probs_ratio_min, 1.0);
  EXPECT_EQ(m.probs_ratio_clamped_fraction, 0.0);
}

// The clipped branch carries no gradient; the unclipped branch carries -A r.
TEST(GrpoLoss, ClippedBranchSemantics) {
  const float prev = -1.0f;
  const float lr[] = {0.5f, -0.5f};  // r = e^0.5 > 1.2, r = e^-0.5 < 0.8
  GrpoLossConfig c;
  c.reference_policy_kl_penalty = 0;
  for (float A : {1.0f, -1.0f})
    for (float l : lr) {
      const std::vector<float> curr = {prev + l}, p = {prev}, adv = {A};
      const std::vector<int64_t> off = {0, 1};
      std::vector<float> grad(1);
      const GrpoLossResult res = grpo_loss(c, {curr, p, p, {}, adv, off, 1, 1}, grad);
      const double r = std::exp(static_cast<double>(curr[0]) - prev);
      // A > 0: r above 1+eps is clipped (no gradient), below 1-eps the unclipped -A r wins.
      // A < 0: the mirror image.
      const bool clipped = (A > 0) == (r > 1);
      if (clipped) {
        EXPECT_EQ(grad[0], 0.0f) << "A " << A << " r " << r;
        EXPECT_NEAR(res.loss, -A * std::clamp(r, 0.8, 1.2), 1e-12);
        EXPECT_EQ(res.sums.finalize().probs_ratio_clamped_fraction, 1.0);
      } else {
        EXPECT_FLOAT_EQ(grad[0], static_cast<float>(-A * r)) << "A " << A << " r " << r;
        EXPECT_NEAR(res.loss, -A * r, 1e-12);
      }
    }
}

// Per-token gradients are bit-identical whether a sequence is in one micro-batch or another; the
// losses add up and the metric sums merge to the global values.
TEST(GrpoLoss, MicroBatchesAddUpToTheGlobalBatch) {
  const Batch b = make_batch(23);
  for (const auto& [name, config] : all_variants()) {
    SCOPED_TRACE(name);
    std::vector<float> whole(b.tokens());
    const GrpoLossResult all = grpo_loss(config, b.view(), whole);
    std::vector<float> parts(b.tokens());
    GrpoMetricSums sums;
    const size_t cuts[] = {0, 3, 4, 10, 14};  // micro-batches of 3, 1, 6 and 4 sequences
    for (size_t k = 0; k + 1 < std::size(cuts); ++k) {
      const int64_t t0 = b.offsets[cuts[k]], t1 = b.offsets[cuts[k + 1]];
      std::vector<int64_t> off;
      for (size_t s = cuts[k]; s <= cuts[k + 1]; ++s) off.push_back(b.offsets[s] - t0);
      auto sl = [&](const std::vector<float>& v) { return std::span<const float>(v).subspan(t0, t1 - t0); };
      const GrpoLossBatch mb{sl(b.curr), sl(b.prev), sl(b.gen), sl(b.ref),
                             std::span<const float>(b.advantages).subspan(cuts[k], cuts[k + 1] - cuts[k]), off,
                             b.global_tokens, b.global_sequences};
      sums.merge(grpo_loss(config, mb, std::span<float>(parts).subspan(t0, t1 - t0)).sums);
    }
    EXPECT_NEAR(sums.loss, all.loss, 1e-14 * (1 + std::fabs(all.loss)));
    EXPECT_EQ(parts, whole);
    const auto got = named_metrics(sums.finalize()), want = named_metrics(all.sums.finalize());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i].second, want[i].second, 1e-14 * (1 + std::fabs(want[i].second))) << got[i].first;
  }
}

// A NaN or infinite generator log-prob gives importance weight 0 (never the lower bound), is
// out of bounds, and is left out of the mismatch metrics.
TEST(GrpoLoss, NonFiniteGeneratorLogProbsGiveZeroWeight) {
  const std::vector<float> curr = {-0.5f, -1.0f, -0.7f, -0.2f};
  const std::vector<float> prev = {-0.5f, -1.0f, -0.7f, -0.2f};
  for (float bad : {kNaN, kInf, -kInf}) {
    const std::vector<float> gen = {-0.5f, bad, -0.7f, -0.2f};
    const std::vector<float> adv = {1.0f, -2.0f};
    const std::vector<int64_t> off = {0, 2, 4};
    for (TruncatedIsType type : {TruncatedIsType::kTis, TruncatedIsType::kIcepop, TruncatedIsType::kSeqMaskTis}) {
      GrpoLossConfig c;
      c.reference_policy_kl_penalty = 0;
      c.use_importance_sampling_correction = true;
      c.truncated_importance_sampling_ratio = 2.0;
      c.truncated_importance_sampling_ratio_min = 0.5;
      c.truncated_importance_sampling_type = type;
      std::vector<float> grad(4);
      const GrpoLossResult r = grpo_loss(c, {curr, prev, gen, {}, adv, off, 4, 2}, grad);
      EXPECT_EQ(grad[1], 0.0f) << to_string(type);
      EXPECT_TRUE(std::isfinite(r.loss));
      const GrpoMetrics m = r.sums.finalize();
      if (type == TruncatedIsType::kSeqMaskTis) {
        EXPECT_EQ(grad[0], 0.0f);  // the whole sequence is masked
        EXPECT_EQ(m.is_oob_ratio, 0.5);
        EXPECT_EQ(m.sampling_importance_ratio, 0.5);
      } else {
        EXPECT_FLOAT_EQ(grad[0], -0.25f);
        EXPECT_EQ(m.is_oob_ratio, 0.25);
        EXPECT_EQ(m.sampling_importance_ratio, 0.75);
      }
      EXPECT_EQ(m.num_nonfinite_logprobs, 1.0);
      EXPECT_EQ(m.token_mult_prob_error, 1.0);  // the three finite tokens agree exactly
    }
  }
}

TEST(GrpoLoss, NonFiniteCurrMakesTheLossNonFiniteWithoutThrowing) {
  const std::vector<float> curr = {kNaN, -1.0f}, lp = {-0.5f, -1.0f}, adv = {1.0f};
  const std::vector<int64_t> off = {0, 2};
  std::vector<float> grad(2);
  EXPECT_TRUE(std::isnan(grpo_loss(GrpoLossConfig{}, {curr, lp, lp, lp, adv, off, 2, 1}, grad).loss));
}

TEST(GrpoMismatchMetrics, KnownValues) {
  // d = prev - gen = ln 2: exp|d| = 2, e^d - d - 1 = 1 - ln 2, e^-d + d - 1 = ln 2 - 1/2.
  const double ln2 = std::log(2.0);
  const std::vector<float> prev = {static_cast<float>(std::log(0.5))}, gen = {static_cast<float>(std::log(0.25))};
  MismatchMetricSums s;
  accumulate_mismatch_metrics(prev, gen, s);
  const double d = static_cast<double>(prev[0]) - gen[0];
  EXPECT_NEAR(d, ln2, 1e-7);
  EXPECT_NEAR(s.token_mult_prob_error.mean(), std::exp(d), 1e-15);
  EXPECT_NEAR(s.gen_kl_error.mean(), std::exp(d) - d - 1, 1e-15);
  EXPECT_NEAR(s.policy_kl_error.mean(), std::exp(-d) + d - 1, 1e-15);
  // JS of Bernoulli(1/2) and Bernoulli(1/4), M = Bernoulli(3/8).
  const double p = std::exp(static_cast<double>(prev[0])), q = std::exp(static_cast<double>(gen[0])), m = (p + q) / 2;
  const double js = 0.5 * (p * std::log(p / m) + (1 - p) * std::log((1 - p) / (1 - m))) +
                    0.5 * (q * std::log(q / m) + (1 - q) * std::log((1 - q) / (1 - m)));
  EXPECT_NEAR(s.js_divergence_error.mean(), js, 1e-15);
  EXPECT_GT(js, 0.0);
  EXPECT_LT(js, ln2);
  // A certain token on both sides and a positive log-prob from rounding: JS 0.
  MismatchMetricSums t;
  accumulate_mismatch_metrics(std::vector<float>{0.0f, 1e-7f}, std::vector<float>{0.0f, 0.0f}, t);
  EXPECT_EQ(t.js_divergence_error.mean(), 0.0);
}

TEST(GrpoMismatchMetrics, LengthBinsTakeEachSequencesTokens) {
  EXPECT_EQ(length_bin(1), 0);
  EXPECT_EQ(length_bin(16), 0);
  EXPECT_EQ(length_bin(17), 1);
  EXPECT_EQ(length_bin(64), 2);
  EXPECT_EQ(length_bin(65), 3);
  EXPECT_EQ(length_bin(2048), 7);
  EXPECT_EQ(length_bin(1 << 20), kLengthBins - 1);
  EXPECT_EQ(length_bin_name(0), "1-16");
  EXPECT_EQ(length_bin_name(1), "17-32");
  EXPECT_EQ(length_bin_name(7), "1025-2048");
  EXPECT_EQ(length_bin_name(kLengthBins - 1), "2049+");
  // A 2-token sequence with exp|d| = 2 on both tokens, then a 20-token one in exact agreement
  // but for one token with exp|d| = 4.
  std::vector<float> prev(22, -1.0f), gen(22, -1.0f);
  gen[0] = gen[1] = -1.0f - static_cast<float>(std::log(2.0));
  gen[5] = -1.0f + static_cast<float>(std::log(4.0));
  const std::vector<int64_t> offsets = {0, 2, 22};
  MismatchMetricSums s;
  accumulate_mismatch_metrics(prev, gen, s, offsets);
  EXPECT_EQ(s.token_mult_prob_error_by_length[0].count, 2);
  EXPECT_NEAR(s.token_mult_prob_error_by_length[0].mean(), 2.0, 1e-6);
  EXPECT_EQ(s.token_mult_prob_error_by_length[1].count, 20);
  EXPECT_NEAR(s.token_mult_prob_error_by_length[1].mean(), (19.0 + 4.0) / 20.0, 1e-6);
  EXPECT_EQ(s.token_mult_prob_error_by_length[2].count, 0);
  EXPECT_NEAR(s.token_mult_prob_error.mean(), (2 * 2.0 + 19.0 + 4.0) / 22.0, 1e-6);
}

// ------------------------------------------------------------------------------------------------
// Bad input
// ------------------------------------------------------------------------------------------------

TEST(GrpoLoss, BadConfigIsAClearError) {
  auto bad = [](auto edit, const std::string& needle) {
    GrpoLossConfig c;
    c.use_importance_sampling_correction = true;
    edit(c);
    expect_error([&] { validate_grpo_loss_config(c); }, needle);
  };
  bad([](GrpoLossConfig& c) { c.truncated_importance_sampling_ratio = 0.5, c.truncated_importance_sampling_ratio_min = 0.8; },
      "must not exceed");
  bad([](GrpoLossConfig& c) { c.truncated_importance_sampling_ratio = -1.0; }, "truncated_importance_sampling_ratio must be");
  bad([](GrpoLossConfig& c) { c.truncated_importance_sampling_ratio_min = 0.5; }, "has no effect without");
  bad([](GrpoLossConfig& c) { c.use_importance_sampling_correction = false, c.truncated_importance_sampling_ratio = 2.0; },
      "use_importance_sampling_correction is false");
  bad([](GrpoLossConfig& c) {
    c.truncated_importance_sampling_ratio = 2.0;
    c.truncated_importance_sampling_type = TruncatedIsType::kSeqMaskTis;
    c.sequence_level_importance_ratios = true;
  },
      "cannot be combined");
  bad([](GrpoLossConfig& c) { c.ratio_clip_min = 1.5; }, "ratio_clip_min");
  bad([](GrpoLossConfig& c) { c.ratio_clip_max = -0.1; }, "ratio_clip_max");
  bad([](GrpoLossConfig& c) { c.reference_policy_kl_penalty = kNaN; }, "reference_policy_kl_penalty");
  expect_error([] { parse_kl_type("k4"); }, "expected one of k1, k2, k3");
  expect_error([] { parse_truncated_is_type("TIS"); }, "tis, icepop, seq-mask-tis");
  EXPECT_EQ(parse_truncated_is_type("seq-mask-tis"), TruncatedIsType::kSeqMaskTis);
}

TEST(GrpoLoss, BadBatchIsAClearError) {
  const Batch b = make_batch(5);
  const GrpoLossConfig c;
  std::vector<float> grad(b.tokens());
  auto bad = [&](auto edit, const std::string& needle) {
    Batch x = b;
    std::vector<float> g = grad;
    edit(x, g);
    expect_error([&] { grpo_loss(c, x.view(), g); }, needle);
  };
  bad([](Batch& x, std::vector<float>&) { x.prev.pop_back(); }, "differ in length");
  bad([](Batch& x, std::vector<float>&) { x.ref.clear(); }, "reference log-probs");
  bad([](Batch&, std::vector<float>& g) { g.pop_back(); }, "gradient buffer");
  bad([](Batch& x, std::vector<float>&) { x.advantages.pop_back(); }, "advantages for");
  bad([](Batch& x, std::vector<float>&) { x.offsets.back() -= 1; }, "last offset");
  bad([](Batch& x, std::vector<float>&) { x.offsets[2] = x.offsets[1]; }, "sequence 1 is empty");
  bad([](Batch& x, std::vector<float>&) { x.offsets[0] = 1; }, "start with 0");
  bad([](Batch& x, std::vector<float>&) { x.global_tokens = 3; }, "global_num_tokens");
  bad([](Batch& x, std::vector<float>&) { x.global_sequences = 2; }, "global_num_sequences");
  bad([](Batch& x, std::vector<float>&) { x.advantages[4] = kInf; }, "advantage of sequence 4");
  // beta = 0 allows an empty ref; an empty batch is a zero loss.
  GrpoLossConfig no_kl;
  no_kl.reference_policy_kl_penalty = 0;
  Batch x = b;
  x.ref.clear();
  EXPECT_NO_THROW(grpo_loss(no_kl, x.view(), grad));
  const std::vector<int64_t> off = {0};
  EXPECT_EQ(grpo_loss(c, {{}, {}, {}, {}, {}, off, 0, 0}, {}).loss, 0.0);
}

}  // namespace
}  // namespace fp8rl
