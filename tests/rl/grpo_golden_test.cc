// GRPO advantages, loss, gradient and metrics against tools/oracles/grpo_golden.py, an
// independent NumPy implementation (float64, padded arrays, gradient by finite differences), run
// as a subprocess with Debian's /usr/bin/python3.
//
// Tolerances. The inputs are float32 values that both sides read exactly. The C++ computes in
// double, the script in float64, so values differ only by summation order and libm rounding:
// at most ~10 operations per token on <= 40 tokens of magnitude <= ~30 gives ~1e-13, and we
// allow 1e-11 * (1 + |expected|). The C++ rounds gradients and advantages to float once
// (<= 2^-24 relative); the script's 4-point finite difference is accurate to ~1e-11 absolute
// (it checks itself at two step sizes), so gradients get 2^-23 |expected| + 1e-10 and advantages
// 2^-23 |expected| + 1e-12.
// ctest-file-label: oracle
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "rl/advantages.h"
#include "rl/grpo_loss.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using nlohmann::json;

double number(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
    if (s == "inf") return std::numeric_limits<double>::infinity();
    if (s == "-inf") return -std::numeric_limits<double>::infinity();
    ADD_FAILURE() << "unexpected string in golden JSON: " << s;
    return 0;
  }
  return v.get<double>();
}

std::vector<float> floats(const json& v) {
  std::vector<float> out;
  for (const json& x : v) out.push_back(static_cast<float>(number(x)));
  return out;
}

std::vector<double> doubles(const json& v) {
  std::vector<double> out;
  for (const json& x : v) out.push_back(number(x));
  return out;
}

GrpoLossConfig config_from(const json& j) {
  GrpoLossConfig c;
  if (j.contains("ratio_clip_min")) c.ratio_clip_min = j["ratio_clip_min"];
  if (j.contains("ratio_clip_max")) c.ratio_clip_max = j["ratio_clip_max"];
  if (j.contains("use_importance_sampling_correction"))
    c.use_importance_sampling_correction = j["use_importance_sampling_correction"];
  if (j.contains("truncated_importance_sampling_ratio") && !j["truncated_importance_sampling_ratio"].is_null())
    c.truncated_importance_sampling_ratio = j["truncated_importance_sampling_ratio"].get<double>();
  if (j.contains("truncated_importance_sampling_ratio_min"))
    c.truncated_importance_sampling_ratio_min = j["truncated_importance_sampling_ratio_min"];
  if (j.contains("truncated_importance_sampling_type"))
    c.truncated_importance_sampling_type = parse_truncated_is_type(j["truncated_importance_sampling_type"].get<std::string>());
  if (j.contains("sequence_level_importance_ratios"))
    c.sequence_level_importance_ratios = j["sequence_level_importance_ratios"];
  if (j.contains("reference_policy_kl_penalty")) c.reference_policy_kl_penalty = j["reference_policy_kl_penalty"];
  if (j.contains("reference_policy_kl_type"))
    c.reference_policy_kl_type = parse_kl_type(j["reference_policy_kl_type"].get<std::string>());
  if (j.contains("token_level_loss")) c.token_level_loss = j["token_level_loss"];
  return c;
}

bool close(double got, double want, double abs_tol, double rel_tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::fabs(got - want) <= abs_tol + rel_tol * std::fabs(want);
}

class GrpoGolden : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (const std::string why = testing::python_oracle_unavailable("numpy"); !why.empty()) GTEST_SKIP() << why;
    const testing::TempDir tmp;
    const auto path = tmp / "grpo_golden.json";
    const std::string cmd = "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/grpo_golden.py " + path.string();
    const int rc = std::system(cmd.c_str());
    ASSERT_EQ(rc, 0) << "oracle failed: " << cmd << " (is python3-numpy installed?)";
    std::ifstream in(path);
    golden_ = new json(json::parse(in));
  }
  static void TearDownTestSuite() {
    delete golden_;
    golden_ = nullptr;
  }
  static const json& golden() { return *golden_; }
  static json* golden_;
};
json* GrpoGolden::golden_ = nullptr;

constexpr double kValueTol = 1e-11;
constexpr double kFloatRel = 1.0 / (1 << 23);  // 2^-23: one float rounding with margin

TEST_F(GrpoGolden, Advantages) {
  ASSERT_NE(golden_, nullptr);
  int cases = 0;
  for (const json& c : golden()["advantage_cases"]) {
    SCOPED_TRACE(c["name"].get<std::string>());
    AdvantageConfig cfg;
    cfg.use_leave_one_out_baseline = c["use_leave_one_out_baseline"];
    cfg.normalize_rewards = c["normalize_rewards"];
    const std::vector<float> rewards = floats(c["rewards"]);
    const std::vector<double> want = doubles(c["expected"]);
    const std::vector<float> got = compute_advantages(rewards, c["group_size"].get<int64_t>(), cfg);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_TRUE(close(got[i], want[i], 1e-12, kFloatRel)) << "response " << i << ": C++ " << got[i] << " NumPy " << want[i];
    ++cases;
  }
  EXPECT_EQ(cases, 24);
}

struct LossCase {
  std::string name;
  GrpoLossConfig config;
  std::vector<float> curr, prev, gen, ref, advantages;
  std::vector<int64_t> offsets;
  int64_t global_num_tokens = 0, global_num_sequences = 0;
  double loss = 0;
  std::vector<double> grad;
  std::map<std::string, double> metrics;

  GrpoLossBatch batch() const {
    return {curr, prev, gen, ref, advantages, offsets, global_num_tokens, global_num_sequences};
  }
};

LossCase loss_case(const json& c) {
  LossCase k;
  k.name = c["name"];
  k.config = config_from(c["config"]);
  k.curr = floats(c["curr"]);
  k.prev = floats(c["prev"]);
  k.gen = floats(c["gen"]);
  k.ref = floats(c["ref"]);
  k.advantages = floats(c["advantages"]);
  k.offsets = c["offsets"].get<std::vector<int64_t>>();
  k.global_num_tokens = c["global_num_tokens"];
  k.global_num_sequences = c["global_num_sequences"];
  k.loss = number(c["expected"]["loss"]);
  k.grad = doubles(c["expected"]["grad"]);
  for (const auto& [name, v] : c["expected"]["metrics"].items()) k.metrics[name] = number(v);
  return k;
}

void expect_metrics(const GrpoMetrics& got, const std::map<std::string, double>& want) {
  const auto named = named_metrics(got);
  ASSERT_EQ(named.size(), want.size()) << "the oracle and the engine name different sets of metrics";
  for (const auto& [name, value] : named) {
    const auto it = want.find(name);
    ASSERT_NE(it, want.end()) << "metric " << name << " is not in the oracle's output";
    EXPECT_TRUE(close(value, it->second, kValueTol, kValueTol)) << name << ": C++ " << value << " NumPy " << it->second;
  }
}

TEST_F(GrpoGolden, LossGradientAndMetricsOfEveryVariant) {
  ASSERT_NE(golden_, nullptr);
  int cases = 0;
  for (const json& c : golden()["loss_cases"]) {
    const LossCase k = loss_case(c);
    SCOPED_TRACE(k.name);
    std::vector<float> grad(k.curr.size());
    const GrpoLossResult r = grpo_loss(k.config, k.batch(), grad);
    EXPECT_TRUE(close(r.loss, k.loss, kValueTol, kValueTol)) << "loss: C++ " << r.loss << " NumPy " << k.loss;
    double worst = 0;
    size_t worst_t = 0;
    for (size_t t = 0; t < grad.size(); ++t) {
      const double excess = std::fabs(grad[t] - k.grad[t]) - (1e-10 + kFloatRel * std::fabs(k.grad[t]));
      if (excess > worst) worst = excess, worst_t = t;
    }
    EXPECT_LE(worst, 0.0) << "gradient of token " << worst_t << ": C++ " << grad[worst_t] << " NumPy "
                          << k.grad[worst_t];
    expect_metrics(r.sums.finalize(), k.metrics);

    // The standalone mismatch metrics agree with the loss's.
    MismatchMetricSums mm;
    accumulate_mismatch_metrics(k.prev, k.gen, mm);
    EXPECT_TRUE(close(mm.token_mult_prob_error.mean(), k.metrics.at("token_mult_prob_error"), kValueTol, kValueTol));
    EXPECT_TRUE(close(mm.gen_kl_error.mean(), k.metrics.at("gen_kl_error"), kValueTol, kValueTol));
    EXPECT_TRUE(close(mm.policy_kl_error.mean(), k.metrics.at("policy_kl_error"), kValueTol, kValueTol));
    EXPECT_TRUE(close(mm.js_divergence_error.mean(), k.metrics.at("js_divergence_error"), kValueTol, kValueTol));
    EXPECT_EQ(static_cast<double>(mm.num_nonfinite), k.metrics.at("num_nonfinite_logprobs"));
    ++cases;
  }
  EXPECT_EQ(cases, 26);
}

// The same golden values from two micro-batches (split at a sequence boundary) with the global
// denominators: losses add, metric sums merge.
TEST_F(GrpoGolden, MicroBatchesReproduceTheGlobalValues) {
  ASSERT_NE(golden_, nullptr);
  for (const json& c : golden()["loss_cases"]) {
    const LossCase k = loss_case(c);
    SCOPED_TRACE(k.name);
    const size_t S = k.offsets.size() - 1, split_seq = S / 2;
    GrpoMetricSums sums;
    std::vector<float> grad(k.curr.size());
    for (int part = 0; part < 2; ++part) {
      const size_t s0 = part == 0 ? 0 : split_seq, s1 = part == 0 ? split_seq : S;
      const int64_t t0 = k.offsets[s0], t1 = k.offsets[s1];
      std::vector<int64_t> offsets;
      for (size_t s = s0; s <= s1; ++s) offsets.push_back(k.offsets[s] - t0);
      auto slice = [&](const std::vector<float>& v) {
        return v.empty() ? std::span<const float>() : std::span<const float>(v).subspan(t0, t1 - t0);
      };
      GrpoLossBatch b{slice(k.curr), slice(k.prev), slice(k.gen), slice(k.ref),
                      std::span<const float>(k.advantages).subspan(s0, s1 - s0), offsets,
                      k.global_num_tokens, k.global_num_sequences};
      sums.merge(grpo_loss(k.config, b, std::span<float>(grad).subspan(t0, t1 - t0)).sums);
    }
    EXPECT_TRUE(close(sums.loss, k.loss, kValueTol, kValueTol));
    for (size_t t = 0; t < grad.size(); ++t)
      EXPECT_TRUE(close(grad[t], k.grad[t], 1e-10, kFloatRel)) << "token " << t;
    expect_metrics(sums.finalize(), k.metrics);
  }
}

}  // namespace
}  // namespace fp8rl
