// The generation engine against the trainer: greedy decoding, exact log-prob agreement with BF16
// and FP8 weights, the FP8 KV cache's mismatch, prefix sharing, continuous batching, weight
// updates and KV-scale validation.
// ctest-file-label: quick
#include "generation/engine.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/check.h"
#include "core/rng.h"
#include "model/transformer.h"
#include "jobs/evaluate.h"
#include "jobs/generate_job.h"
#include "rl/refit.h"
#include "tests/generation/engine_fixtures.h"

namespace fp8rl {
namespace {

using testing::kBos;
using testing::kEos;
using testing::kPad;
using testing::sampling_options;

ModelConfig test_config(bool qk_norm) { return testing::engine_test_config(qk_norm); }
Transformer make_trainer(const ModelConfig& c, Precision linear, uint64_t seed, float sharpen = 8.0f,
                         Precision attention = Precision::kF32) {
  return testing::make_sharpened_trainer(c, linear, seed, sharpen, attention);
}
std::vector<std::vector<int32_t>> make_prompts(int n, uint64_t seed) { return testing::make_random_prompts(n, seed); }
PrecisionPolicy policy_for(Precision linear) {
  PrecisionPolicy p;
  p.linear = linear;
  return p;
}

// The trainer's log-prob of every generated token (prompt + response as one sequence).
std::vector<std::vector<float>> trainer_logprobs(Transformer& t, const std::vector<std::vector<int32_t>>& prompts,
                                                 const std::vector<GeneratedSequence>& seqs, int64_t G) {
  int64_t T = 0;
  for (const auto& s : seqs) T = std::max<int64_t>(T, prompts[static_cast<size_t>(s.prompt_index)].size() + s.tokens.size());
  TokenBatch b = TokenBatch::empty(static_cast<int64_t>(seqs.size()), T, kPad);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& p = prompts[static_cast<size_t>(seqs[i].prompt_index)];
    std::vector<int32_t> full = p;
    full.insert(full.end(), seqs[i].tokens.begin(), seqs[i].tokens.end());
    for (size_t j = 0; j < full.size(); ++j) b.tokens[i * static_cast<size_t>(T) + j] = full[j];
    for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
      b.targets[i * static_cast<size_t>(T) + p.size() - 1 + j] = seqs[i].tokens[j];
    b.lengths[i] = static_cast<int32_t>(full.size());
  }
  std::vector<float> lp(static_cast<size_t>(b.B * T));
  t.forward(b, lp.data());
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const size_t start = i * static_cast<size_t>(T) + prompts[static_cast<size_t>(seqs[i].prompt_index)].size() - 1;
    out.emplace_back(lp.begin() + static_cast<std::ptrdiff_t>(start),
                     lp.begin() + static_cast<std::ptrdiff_t>(start + seqs[i].tokens.size()));
  }
  (void)G;
  return out;
}

double token_mult_prob_error(const std::vector<GeneratedSequence>& seqs, const std::vector<std::vector<float>>& prev) {
  double sum = 0;
  int64_t n = 0;
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t j = 0; j < seqs[i].logprobs.size(); ++j) {
      sum += std::exp(std::fabs(static_cast<double>(seqs[i].logprobs[j]) - prev[i][j]));
      ++n;
    }
  return sum / static_cast<double>(n);
}

TEST(Generation, GreedyEqualsTheTrainersArgmaxContinuation) {
  for (bool qk_norm : {false, true}) {
    Transformer t = make_trainer(test_config(qk_norm), Precision::kBF16, 3);
    GenerationEngine e(t.config(), t.policy(), {});
    refit_generator_weights(t, e);
    const auto prompts = make_prompts(6, 1);
    GenerateOptions o = sampling_options(10, 1);
    o.sampling.temperature = 0.0f;
    const auto seqs = e.generate(prompts, 1, o);
    const auto want = greedy_continue(t, prompts, 10, kEos, kPad);
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> got = seqs[i].tokens;
      if (!got.empty() && got.back() == kEos) got.pop_back();
      EXPECT_EQ(got, want[i]) << "prompt " << i << " qk_norm " << qk_norm;
    }
  }
}

// Linear precision x attention precision (policy.attention_precision): the generator computes the
// trainer's attention products from the same roundings either way.
// With `moe`, Qwen3-MoE layers (8 experts, 2 per token): the generator must also route every token
// to the trainer's experts.
struct AgreementCase {
  Precision linear, attention;
  bool moe = false;
};
class GenerationAgreement : public ::testing::TestWithParam<AgreementCase> {
 protected:
  static ModelConfig config(bool qk_norm) {
    ModelConfig c = test_config(qk_norm);
    if (GetParam().moe) c.num_experts = 8, c.experts_per_token = 2, c.d_expert = 128;
    return c;
  }
};

TEST_P(GenerationAgreement, SampledLogprobsEqualTheTrainersExactly) {
  Transformer t = make_trainer(config(true), GetParam().linear, 5, 8.0f, GetParam().attention);
  GenerationEngine e(t.config(), t.policy(), {});
  refit_generator_weights(t, e);
  const auto prompts = make_prompts(5, 2);
  const auto seqs = e.generate(prompts, 3, sampling_options(12, 7));
  const auto prev = trainer_logprobs(t, prompts, seqs, 3);
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
      ASSERT_EQ(seqs[i].logprobs[j], prev[i][j]) << "sequence " << i << " token " << j;
  EXPECT_EQ(token_mult_prob_error(seqs, prev), 1.0);
  if (!GetParam().moe) return;
  // The generator's record of every position's experts is the trainer's routing of the same rows
  // (trainer_logprobs' batch: sequence i in rows i*T .. i*T + T - 1).
  const std::vector<std::vector<int32_t>>& trainer = t.last_routing();
  ASSERT_EQ(trainer.size(), 2u);
  const int64_t k = t.config().experts_per_token, T = static_cast<int64_t>(trainer[0].size()) / k / static_cast<int64_t>(seqs.size());
  std::vector<int64_t> uses(8, 0);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const int64_t read = static_cast<int64_t>(prompts[static_cast<size_t>(seqs[i].prompt_index)].size() + seqs[i].tokens.size()) - 1;
    ASSERT_EQ(static_cast<int64_t>(seqs[i].routing.size()), read * 2 * k) << "sequence " << i;
    for (int64_t pos = 0; pos < read; ++pos)
      for (int64_t l = 0; l < 2; ++l)
        for (int64_t j = 0; j < k; ++j) {
          const int32_t want = trainer[static_cast<size_t>(l)][static_cast<size_t>((static_cast<int64_t>(i) * T + pos) * k + j)];
          ASSERT_EQ(seqs[i].routing[static_cast<size_t>((pos * 2 + l) * k + j)], want)
              << "sequence " << i << " position " << pos << " layer " << l << " slot " << j;
          ++uses[static_cast<size_t>(want)];
        }
  }
  EXPECT_GT(*std::min_element(uses.begin(), uses.end()), 0) << "every expert is used: the check is not vacuous";
}

// Forwards of many rows run their linears through the GEMM (more than 16 rows in FP8, more than
// 64 in BF16), small ones through the GEMV: 80 sequences decoded together, against the trainer
// and against an engine that decodes 3 at a time (GEMV only), bit for bit.
TEST_P(GenerationAgreement, LargeBatchesThroughTheGemmAgreeExactly) {
  Transformer t = make_trainer(config(false), GetParam().linear, 6, 8.0f, GetParam().attention);
  EngineOptions wide_opts;
  wide_opts.max_num_seqs = 80;
  EngineOptions narrow_opts;
  narrow_opts.max_num_seqs = 3;
  GenerationEngine wide(t.config(), t.policy(), wide_opts), narrow(t.config(), t.policy(), narrow_opts);
  refit_generator_weights(t, wide);
  refit_generator_weights(t, narrow);
  const auto prompts = make_prompts(10, 4);
  const auto seqs = wide.generate(prompts, 8, sampling_options(6, 5));
  EXPECT_GT(wide.last_stats().peak_active, 64);
  const auto alone = narrow.generate(prompts, 8, sampling_options(6, 5));
  const auto prev = trainer_logprobs(t, prompts, seqs, 8);
  ASSERT_EQ(seqs.size(), alone.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(seqs[i].tokens, alone[i].tokens) << "sequence " << i;
    EXPECT_EQ(seqs[i].logprobs, alone[i].logprobs) << "sequence " << i;
    for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
      ASSERT_EQ(seqs[i].logprobs[j], prev[i][j]) << "sequence " << i << " token " << j;
  }
}

// Without batch invariance a lone sequence's decode may take the GEMV's faster path (AVX-512 on an
// AMX machine), whose bits differ from the trainer's GEMM in the last place: the agreement is then
// within the 1.001 instead of exact, and runs still reproduce.
TEST_P(GenerationAgreement, WithoutBatchInvarianceLoneSequencesStayWithinTolerance) {
  Transformer t = make_trainer(config(true), GetParam().linear, 5, 8.0f, GetParam().attention);
  EngineOptions eo;
  eo.max_num_seqs = 1;  // every decode forward is one row
  eo.batch_invariant = false;
  GenerationEngine e(t.config(), t.policy(), eo);
  refit_generator_weights(t, e);
  const auto prompts = make_prompts(5, 2);
  const auto seqs = e.generate(prompts, 3, sampling_options(12, 7));
  const double err = token_mult_prob_error(seqs, trainer_logprobs(t, prompts, seqs, 3));
  std::printf("%s linears, batch_invariant off, one sequence at a time: token_mult_prob_error = %.7f\n",
              precision_name(GetParam().linear), err);
  EXPECT_LT(err, 1.001);
  const auto again = e.generate(prompts, 3, sampling_options(12, 7));
  for (size_t i = 0; i < seqs.size(); ++i) EXPECT_EQ(seqs[i].logprobs, again[i].logprobs) << "sequence " << i;
}

INSTANTIATE_TEST_SUITE_P(Precisions, GenerationAgreement,
                         ::testing::Values(AgreementCase{Precision::kBF16, Precision::kF32},
                                           AgreementCase{Precision::kFP8, Precision::kF32},
                                           AgreementCase{Precision::kBF16, Precision::kBF16},
                                           AgreementCase{Precision::kFP8, Precision::kBF16},
                                           AgreementCase{Precision::kBF16, Precision::kF32, /*moe=*/true},
                                           AgreementCase{Precision::kFP8, Precision::kF32, /*moe=*/true}),
                         [](const auto& info) {
                           return std::string(info.param.moe ? "moe_" : "") + precision_name(info.param.linear) +
                                  "_attention_" + precision_name(info.param.attention);
                         });

TEST(Generation, Fp8KvCacheAndAttentionStayCloseToTheTrainer) {
  // Weights 3x the default init: entropy well below uniform, as a trained model's.
  Transformer t = make_trainer(test_config(true), Precision::kFP8, 5, 3.0f);
  const auto prompts = make_prompts(5, 2);
  // Calibrate as the RL loop does: a trainer forward over prompts + responses of a batch.
  GenerationEngine bf16_kv(t.config(), t.policy(), {});
  refit_generator_weights(t, bf16_kv);
  const auto calib = bf16_kv.generate(prompts, 3, sampling_options(12, 8));
  trainer_logprobs(t, prompts, calib, 3);
  EngineOptions eo;
  eo.kv_dtype = DType::kE4M3;
  GenerationEngine e(t.config(), t.policy(), eo);
  refit_generator_weights(t, e);
  e.set_kv_scales(kv_scales_from_amax(t.last_qkv_amax()));
  const auto seqs = e.generate(prompts, 3, sampling_options(12, 7));
  const double err = token_mult_prob_error(seqs, trainer_logprobs(t, prompts, seqs, 3));
  std::printf("FP8 KV cache + FP8 attention: token_mult_prob_error = %.5f\n", err);
  EXPECT_GT(err, 1.0);
  EXPECT_LT(err, 1.05);
}

// With policy.fp8_kv_attention the trainer's attention reads the E4M3 values of Q, K and V the
// generator computed with (same scales, per layer or per KV head) and applies the scales as the
// generator does (to the scores and the outputs, per KV head): the two compute the same
// arithmetic, and the generator's log-probs are the trainer's bit for bit, with FP32 and BF16
// attention alike.
TEST(Generation, TrainerAttendingOverTheFp8KvValuesAgreesWithTheGenerator) {
  for (const Precision attention : {Precision::kF32, Precision::kBF16}) {
    Transformer t = make_trainer(test_config(true), Precision::kFP8, 5, 3.0f, attention);
    const auto prompts = make_prompts(5, 2);
    GenerationEngine bf16_kv(t.config(), t.policy(), {});
    refit_generator_weights(t, bf16_kv);
    trainer_logprobs(t, prompts, bf16_kv.generate(prompts, 3, sampling_options(12, 8)), 3);
    const std::vector<Transformer::QkvAmax> amax = t.last_qkv_amax();
    for (const KvScaleGranularity granularity : {KvScaleGranularity::kLayer, KvScaleGranularity::kHead}) {
      for (const bool fp8_attention : {true, false}) {
        EngineOptions eo;
        eo.kv_dtype = DType::kE4M3;
        eo.fp8_attention = fp8_attention;
        GenerationEngine e(t.config(), t.policy(), eo);
        refit_generator_weights(t, e);
        const std::vector<QkvScales> scales = kv_scales_from_amax(amax, granularity);
        e.set_kv_scales(scales);
        const auto seqs = e.generate(prompts, 3, sampling_options(12, 7));
        t.set_attention_e4m3_scales(attention_e4m3_scales(scales, t.config().n_kv_heads, fp8_attention));
        const double err = token_mult_prob_error(seqs, trainer_logprobs(t, prompts, seqs, 3));
        t.set_attention_e4m3_scales({});
        const double err_off = token_mult_prob_error(seqs, trainer_logprobs(t, prompts, seqs, 3));
        std::printf("%s attention, %s scales, fp8 attention %d: token_mult_prob_error %.6f (trainer on BF16 values: "
                    "%.5f)\n",
                    precision_name(attention), kv_scale_granularity_name(granularity), fp8_attention, err, err_off);
        EXPECT_EQ(err, 1.0);
        EXPECT_GT(err_off, 1.01);
      }
    }
    EXPECT_THROW(t.set_attention_e4m3_scales(std::vector<Transformer::AttentionE4m3Scales>(1)), Error);
  }
}

TEST(Generation, PrefixSharingAndContinuousBatchingDoNotChangeResults) {
  Transformer t = make_trainer(test_config(false), Precision::kFP8, 9);
  const auto prompts = make_prompts(4, 3);
  const GenerateOptions shared = sampling_options(10, 11);
  GenerateOptions unshared = shared;
  unshared.share_prefix = false;
  GenerationEngine wide(t.config(), t.policy(), {});
  refit_generator_weights(t, wide);
  const auto a = wide.generate(prompts, 4, shared);
  const auto b = wide.generate(prompts, 4, unshared);
  EngineOptions narrow_opts;
  narrow_opts.max_num_seqs = 3;
  GenerationEngine narrow(t.config(), t.policy(), narrow_opts);
  refit_generator_weights(t, narrow);
  const auto c = narrow.generate(prompts, 4, shared);
  EXPECT_LE(narrow.last_stats().peak_active, 3);
  ASSERT_EQ(a.size(), 16u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_EQ(a[i].logprobs, b[i].logprobs) << i;
    EXPECT_EQ(a[i].tokens, c[i].tokens) << i;
    EXPECT_EQ(a[i].logprobs, c[i].logprobs) << i;
  }
  // Each sequence alone gives the same result (its random stream depends only on its index).
  GenerateOptions one = shared;
  one.first_sequence_index = 2 * 4 + 1;
  const auto d = wide.generate({prompts[2]}, 1, one);
  EXPECT_EQ(d[0].tokens, a[2 * 4 + 1].tokens);
  EXPECT_EQ(d[0].logprobs, a[2 * 4 + 1].logprobs);
}

TEST(Generation, Fp8KvCacheHoldsTwiceTheTokens) {
  const ModelConfig c = test_config(false);
  const int64_t budget = 1 << 20;
  EngineOptions bf;
  bf.kv_cache_bytes = budget;
  EngineOptions f8 = bf;
  f8.kv_dtype = DType::kE4M3;
  GenerationEngine a(c, policy_for(Precision::kBF16), bf), b(c, policy_for(Precision::kBF16), f8);
  EXPECT_EQ(b.kv_cache().capacity_tokens(), 2 * a.kv_cache().capacity_tokens());
  EXPECT_EQ(a.kv_cache().bytes_per_token(), 2 * c.n_layers * c.kv_dim() * 2);
  EXPECT_LE(b.kv_cache().storage_bytes(), budget + 64 * c.n_layers);
}

// `fp8rl generate` without a chosen budget: kv_budget_for_request holds the prompt once and every
// sample's own pages, so all samples decode together; one page less and a sample waits.
TEST(Generation, AKvBudgetSizedToTheRequestAdmitsEverySampleAtOnce) {
  const ModelConfig c = test_config(false);
  const auto prompts = make_prompts(1, 7);
  const int64_t samples = 6, new_tokens = 20, plen = static_cast<int64_t>(prompts[0].size());
  const int64_t per_token = KvCache::bytes_per_token(c.n_layers, c.kv_dim(), DType::kBF16);
  const int64_t budget = kv_budget_for_request(per_token, plen, samples, new_tokens, 64, 1024, INT64_MAX);
  EXPECT_EQ(budget, (1 + samples * 2) * kPageTokens * per_token);  // 1 prompt page, 2 pages of 20 tokens each
  Transformer t = make_trainer(c, Precision::kBF16, 1);
  for (const int64_t bytes : {budget, budget - kPageTokens * per_token}) {
    EngineOptions eo;
    eo.kv_cache_bytes = bytes;
    GenerationEngine e(c, t.policy(), eo);
    refit_generator_weights(t, e);
    GenerateOptions g = sampling_options(new_tokens, 1);
    g.eos = -1;  // every sample runs to its last token
    e.generate(prompts, static_cast<int>(samples), g);
    EXPECT_EQ(e.last_stats().peak_active, bytes == budget ? samples : samples - 1) << bytes;
    EXPECT_EQ(e.last_stats().kv_waited, bytes == budget ? 0 : 1) << bytes;
  }
  // At most max_num_seqs samples at once; never below the configured budget nor above the cap.
  EXPECT_EQ(kv_budget_for_request(per_token, plen, samples, new_tokens, 2, 1024, INT64_MAX),
            (1 + 2 * 2) * kPageTokens * per_token);
  EXPECT_EQ(kv_budget_for_request(per_token, plen, samples, new_tokens, 64, budget * 2, INT64_MAX), budget * 2);
  EXPECT_EQ(kv_budget_for_request(per_token, plen, samples, new_tokens, 64, 1024, 4096), 4096);
}

TEST(Generation, WeightUpdateLeavesNoStaleStateAndScalesAreValidated) {
  const ModelConfig c = test_config(true);
  Transformer t1 = make_trainer(c, Precision::kFP8, 1), t2 = make_trainer(c, Precision::kFP8, 2);
  EngineOptions eo;
  eo.kv_dtype = DType::kE4M3;
  GenerationEngine updated(c, t1.policy(), eo), fresh(c, t2.policy(), eo);
  std::vector<QkvScales> scales(2, QkvScales{0.05f, 0.05f, 0.05f, {}, {}, {}});
  const auto prompts = make_prompts(3, 4);
  refit_generator_weights(t1, updated);
  updated.set_kv_scales(scales);
  updated.generate(prompts, 2, sampling_options(6, 1));
  refit_generator_weights(t2, updated);
  // New weights invalidate the scales: generating now is refused.
  EXPECT_THROW(updated.generate(prompts, 2, sampling_options(6, 1)), Error);
  updated.set_kv_scales(scales);
  refit_generator_weights(t2, fresh);
  fresh.set_kv_scales(scales);
  const auto a = updated.generate(prompts, 2, sampling_options(6, 1));
  const auto b = fresh.generate(prompts, 2, sampling_options(6, 1));
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens);
    EXPECT_EQ(a[i].logprobs, b[i].logprobs);
  }
  for (float bad : {0.0f, -1.0f, NAN, INFINITY}) {
    std::vector<QkvScales> s = scales;
    s[1].k = bad;
    EXPECT_THAT([&] { updated.set_kv_scales(s); }, ::testing::Throws<Error>());
  }
  EXPECT_THROW(updated.set_kv_scales(std::vector<QkvScales>(1, scales[0])), Error);
}

// Qwen2: biases on q, k and v, added before the projections' BF16 rounding on both sides. A
// prompt's log-probs in the generator equal the trainer's to the bit, in BF16 and in FP8, with
// biases large enough to move every token's distribution; and the refit carries a bias update.
TEST(Generation, Qwen2BiasesAgreeExactly) {
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    SCOPED_TRACE(precision_name(linear));
    ModelConfig c = test_config(false);
    c.qkv_bias = true;
    Transformer t = make_trainer(c, linear, 9);
    for (const ParamInfo& p : t.layout().tensors())
      if (is_bias(p.role)) fill_uniform(t.params() + p.offset, p.shape.numel(), -1.0f, 1.0f, 4, static_cast<uint64_t>(p.offset));
    t.refresh_weights();
    GenerationEngine e(t.config(), t.policy(), {});
    refit_generator_weights(t, e);
    const auto prompts = make_prompts(4, 3);
    const auto seqs = e.generate(prompts, 2, sampling_options(10, 5));
    const auto prev = trainer_logprobs(t, prompts, seqs, 2);
    for (size_t i = 0; i < seqs.size(); ++i)
      for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
        ASSERT_EQ(seqs[i].logprobs[j], prev[i][j]) << "sequence " << i << " token " << j;
    // A changed bias reaches the generator through the refit: its log-probs move with the trainer's.
    t.params()[t.layout().find(TensorRole::kVBias, 0).offset] += 2.0f;
    t.refresh_weights();
    refit_generator_weights(t, e);
    const auto after = e.generate(prompts, 2, sampling_options(10, 5));
    const auto prev_after = trainer_logprobs(t, prompts, after, 2);
    bool moved = false;
    for (size_t i = 0; i < after.size(); ++i)
      for (size_t j = 0; j < after[i].tokens.size(); ++j) {
        ASSERT_EQ(after[i].logprobs[j], prev_after[i][j]) << "after the refit: sequence " << i << " token " << j;
        moved |= j < seqs[i].logprobs.size() && after[i].logprobs[j] != seqs[i].logprobs[j];
      }
    EXPECT_TRUE(moved) << "the bias update changed nothing: the check is vacuous";
  }
}

}  // namespace
}  // namespace fp8rl
