// SFT end to end on a tiny model and a toy task (answer = the prompt reversed): the loss falls
// and greedy decoding with the trainer reproduces the answers.
// ctest-file-label: quick
#include "rl/sft.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "jobs/evaluate.h"
#include "tokenizer/char_tokenizer.h"
#include "tasks/running_sum.h"

namespace fp8rl {
namespace {

constexpr int32_t kPad = 0, kBos = 1, kEos = 2;

std::vector<SftExample> reverse_task(int n, uint64_t seed) {
  std::vector<SftExample> out;
  RandomStream rng(seed, 0);
  for (int i = 0; i < n; ++i) {
    SftExample e;
    const int len = 2 + static_cast<int>(rng.next_below(2));
    for (int j = 0; j < len; ++j) e.prompt.push_back(3 + static_cast<int32_t>(rng.next_below(5)));
    e.answer.assign(e.prompt.rbegin(), e.prompt.rend());
    e.prompt.insert(e.prompt.begin(), kBos);
    e.prompt.push_back(8);  // separator
    out.push_back(e);
  }
  return out;
}

TEST(Sft, ValidationPromptsThatCannotFitFailBeforeAnyDecoding) {
  RunningSumTaskConfig c;
  c.min_terms = c.max_terms = 10, c.term_digits = 1, c.train_size = 4, c.val_size = 4;
  const RunningSumTask task(c);
  const CharTokenizer tok;
  // Every prompt is bos + 30 characters: 31 tokens + 33 new tokens = 64 fits, 34 does not.
  EXPECT_EQ(encode_validation_prompts(task, tok, 4, 33, 64).size(), 4u);
  EXPECT_EQ(encode_validation_prompts(task, tok, 2, 33, 64).size(), 2u);
  try {
    encode_validation_prompts(task, tok, 4, 34, 64);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("validation example 0"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("generation.max_new_tokens 34 exceed the model's max_seq_len 64"));
  }
}

TEST(Sft, BatchScoresOnlyAnswerAndEos) {
  SftExample e{{kBos, 5, 6, 8}, {6, 5}};
  SftExample f{{kBos, 3, 8}, {3}};
  const TokenBatch b = make_sft_batch({&e, &f}, kEos, kPad);
  ASSERT_EQ(b.T, 6);
  EXPECT_EQ(b.tokens, (std::vector<int32_t>{1, 5, 6, 8, 6, 5, 1, 3, 8, 3, 0, 0}));
  EXPECT_EQ(b.targets, (std::vector<int32_t>{-1, -1, -1, 6, 5, 2, -1, -1, 3, 2, -1, -1}));
  EXPECT_EQ(b.lengths, (std::vector<int32_t>{6, 4}));
}

class SftLearns : public ::testing::TestWithParam<Precision> {};

TEST_P(SftLearns, AToyTaskAndGreedyDecodingReproducesIt) {
  ModelConfig c = model_preset("tiny", 10);
  c.d_model = 32, c.d_ff = 64, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 16, c.max_seq_len = 16;
  PrecisionPolicy policy = GetParam() == Precision::kF32 ? PrecisionPolicy::fp32() : PrecisionPolicy{};
  policy.linear = GetParam();
  Transformer model(c, policy);
  model.init_random(1);
  AdamWConfig adam;
  adam.lr = 3e-3;
  adam.weight_decay = 0.0;
  AdamW opt(model.layout(), adam);
  const std::vector<SftExample> data = reverse_task(64, 7);
  double first = 0, last = 0;
  const int steps = 150;
  for (int step = 0; step < steps; ++step) {
    std::vector<const SftExample*> batch;
    for (int i = 0; i < 16; ++i) batch.push_back(&data[static_cast<size_t>((step * 16 + i) % data.size())]);
    const SftStepResult r = sft_step(model, opt, make_sft_batch(batch, kEos, kPad), adam.lr);
    ASSERT_FALSE(r.skipped);
    if (step == 0) first = r.loss;
    last = r.loss;
  }
  EXPECT_LT(last, 0.25 * first) << "first loss " << first << " last " << last;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < 16; ++i) prompts.push_back(data[static_cast<size_t>(i)].prompt);
  const auto out = greedy_continue(model, prompts, 5, kEos, kPad);
  int correct = 0;
  for (int i = 0; i < 16; ++i) correct += out[static_cast<size_t>(i)] == data[static_cast<size_t>(i)].answer;
  EXPECT_GE(correct, 12) << "greedy answers correct: " << correct << " of 16";
}

// The step reports the MoE load-balancing loss (a dense model: NaN): one micro-batch's is the
// model's own figure after a forward of it; two halves weighted by their share of the sequences
// come near it (the loss is a product of two means over the rows, so not exactly additive).
TEST(Sft, ReportsTheMoeLoadBalancingLoss) {
  const std::vector<SftExample> data = reverse_task(8, 3);
  std::vector<const SftExample*> all, first, second;
  for (size_t i = 0; i < data.size(); ++i) {
    all.push_back(&data[i]);
    (i < data.size() / 2 ? first : second).push_back(&data[i]);
  }
  ModelConfig c = model_preset("tiny-moe", 10);
  c.max_seq_len = 16;
  auto step = [&](const std::vector<TokenBatch>& batches) {
    Transformer model(c, PrecisionPolicy::fp32());
    model.init_random(5);
    AdamW opt(model.layout(), AdamWConfig{});
    return sft_step(model, opt, batches, 1e-3);
  };
  const TokenBatch whole = make_sft_batch(all, kEos, kPad);
  const double one = step({whole}).moe_aux_loss;
  const double two = step({make_sft_batch(first, kEos, kPad), make_sft_batch(second, kEos, kPad)}).moe_aux_loss;
  ASSERT_TRUE(std::isfinite(one));
  EXPECT_GT(one, 0.0);
  EXPECT_NEAR(two, one, 0.01 * one) << "one micro-batch " << one << ", two " << two;
  Transformer fresh(c, PrecisionPolicy::fp32());
  fresh.init_random(5);
  std::vector<float> lp(static_cast<size_t>(whole.B * whole.T));
  fresh.forward(whole, lp.data());
  EXPECT_DOUBLE_EQ(one, fresh.moe_aux_loss());

  ModelConfig dense = model_preset("tiny", 10);
  dense.max_seq_len = 16;
  Transformer model(dense, PrecisionPolicy::fp32());
  model.init_random(5);
  AdamW opt(model.layout(), AdamWConfig{});
  EXPECT_TRUE(std::isnan(sft_step(model, opt, whole, 1e-3).moe_aux_loss));
}

INSTANTIATE_TEST_SUITE_P(Precisions, SftLearns, ::testing::Values(Precision::kF32, Precision::kBF16, Precision::kFP8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

}  // namespace
}  // namespace fp8rl
