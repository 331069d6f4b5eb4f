// What the trainer's memory savings must not change: activation checkpointing gives the same
// log-probs and gradients bit for bit, and a frozen copy (the reference policy) the same
// log-probs, through forward() and prefix_logprobs(), in every precision.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/memory.h"
#include "io/spill_file.h"
#include "model/transformer.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

// 128-wide rows (real FP8 1x128 blocks), GQA, padding, two sequences that share a prompt.
ModelConfig memory_config(bool qk_norm, bool tied) {
  ModelConfig c;
  c.preset = "memory-test";
  c.vocab_size = 300, c.d_model = 128, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
  c.d_ff = 256, c.max_seq_len = 96, c.qk_norm = qk_norm, c.tie_embeddings = tied;
  return c;
}

TokenBatch memory_batch() {
  TokenBatch b = TokenBatch::empty(3, 80, 0);
  const int32_t lengths[] = {80, 71, 80};
  for (int64_t s = 0; s < b.B; ++s) {
    b.lengths[static_cast<size_t>(s)] = lengths[s];
    for (int64_t t = 0; t < lengths[s]; ++t) {
      const size_t row = static_cast<size_t>(s * b.T + t);
      b.tokens[row] = static_cast<int32_t>(t < 20 ? (t * 37 + 5) % 300 : (t * 13 + s * 101) % 300);  // shared prompt
      if (t >= 19 && t + 1 < lengths[s]) b.targets[row] = static_cast<int32_t>(((t + 1) * 13 + s * 101) % 300);
    }
  }
  return b;
}

PrecisionPolicy policy_of(Precision linear, bool bf16_attention) {
  PrecisionPolicy p = linear == Precision::kF32 ? PrecisionPolicy::fp32() : PrecisionPolicy{};
  p.linear = linear;
  if (bf16_attention) p.attention = Precision::kBF16;
  return p;
}

struct Case {
  Precision linear;
  bool bf16_attention, qk_norm, tied, e4m3_attention;
  std::string name() const {
    return std::string(precision_name(linear)) + (bf16_attention ? "_bf16attn" : "") + (qk_norm ? "_qknorm" : "") +
           (tied ? "" : "_untied") + (e4m3_attention ? "_e4m3attn" : "");
  }
};

class TransformerMemory : public ::testing::TestWithParam<Case> {};

TEST_P(TransformerMemory, CheckpointingAndFrozenCopiesKeepTheBits) {
  const Case k = GetParam();
  Transformer model(memory_config(k.qk_norm, k.tied), policy_of(k.linear, k.bf16_attention));
  model.init_random(7);
  for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 4.0f;  // peakier attention
  model.refresh_weights();
  if (k.e4m3_attention) {
    std::vector<Transformer::AttentionE4m3Scales> scales(3);
    for (auto& s : scales) s = {{0.02f, 0.03f}, {0.025f, 0.02f}, {0.01f, 0.015f}};
    model.set_attention_e4m3_scales(scales);
  }
  const TokenBatch batch = memory_batch();
  const int64_t N = batch.B * batch.T;
  std::vector<float> coeff(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) coeff[static_cast<size_t>(n)] = batch.targets[static_cast<size_t>(n)] >= 0 ? 0.01f * static_cast<float>(n % 17 - 8) : 0.0f;
  auto run = [&](bool checkpointing, std::vector<float>& lp) {
    model.set_activation_checkpointing(checkpointing);
    lp.assign(static_cast<size_t>(N), 0.0f);
    model.zero_grads();
    model.forward(batch, lp.data());
    model.backward(coeff.data());
    return std::vector<float>(model.grads(), model.grads() + model.num_params());
  };
  std::vector<float> lp_plain, lp_ckpt;
  const std::vector<float> plain = run(false, lp_plain);
  const std::vector<float> ckpt = run(true, lp_ckpt);
  EXPECT_EQ(std::memcmp(lp_plain.data(), lp_ckpt.data(), 4 * static_cast<size_t>(N)), 0) << "log-probs";
  for (const ParamInfo& p : model.layout().tensors())
    EXPECT_EQ(std::memcmp(plain.data() + p.offset, ckpt.data() + p.offset, 4 * static_cast<size_t>(p.shape.numel())), 0)
        << "gradient of " << p.name;

  // The frozen copy: no masters, no gradients, the same log-probs.
  if (k.e4m3_attention) return;  // the reference policy never attends over FP8 KV values
  Transformer frozen = model.frozen_copy();
  EXPECT_TRUE(frozen.is_frozen());
  std::vector<float> lp_frozen(static_cast<size_t>(N)), lp_prefix(static_cast<size_t>(N)), lp_model_prefix(lp_prefix.size());
  frozen.forward(batch, lp_frozen.data());
  EXPECT_EQ(std::memcmp(lp_plain.data(), lp_frozen.data(), 4 * static_cast<size_t>(N)), 0) << "frozen forward";
  frozen.prefix_logprobs(batch, lp_prefix.data());
  model.prefix_logprobs(batch, lp_model_prefix.data());
  EXPECT_EQ(std::memcmp(lp_plain.data(), lp_model_prefix.data(), 4 * static_cast<size_t>(N)), 0) << "prefix_logprobs";
  EXPECT_EQ(std::memcmp(lp_plain.data(), lp_prefix.data(), 4 * static_cast<size_t>(N)), 0) << "frozen prefix_logprobs";
  EXPECT_NE(testing::error_message([&] { frozen.backward(coeff.data()); }).find("frozen"), std::string::npos);
  EXPECT_NE(testing::error_message([&] { frozen.params(); }).find("no FP32 masters"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    Variants, TransformerMemory,
    ::testing::Values(Case{Precision::kF32, false, true, true, false}, Case{Precision::kBF16, false, false, true, false},
                      Case{Precision::kBF16, true, true, false, false}, Case{Precision::kFP8, true, true, true, false},
                      Case{Precision::kFP8, false, false, false, false}, Case{Precision::kFP8, true, true, true, true},
                      Case{Precision::kBF16, true, false, true, true}),
    [](const auto& info) { return info.param.name(); });

// The reference policy between GRPO's log-prob phases: a frozen model's weights offloaded to a
// spill file give their pages back (the resident set drops by about their size), forwards are
// refused meanwhile, and restored they give the same log-probs, also after a second offload, which
// writes nothing.
TEST(TransformerMemory, OffloadedWeightsComeBackWithTheSameBits) {
  const testing::TempDir tmp;
  const TokenBatch batch = memory_batch();
  const size_t N = static_cast<size_t>(batch.B * batch.T);
  for (Precision linear : {Precision::kFP8, Precision::kBF16, Precision::kF32}) {
    SCOPED_TRACE(precision_name(linear));
    // 1,024-wide linears: 1 MiB or more each in every precision but FP8's k and v, so memory maps.
    ModelConfig c = memory_config(/*qk_norm=*/true, /*tied=*/true);
    c.d_model = 1024, c.d_ff = 1024, c.n_layers = 1, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 128;
    Transformer model(c, policy_of(linear, /*bf16_attention=*/linear != Precision::kF32));
    model.init_random(3);
    Transformer frozen = model.frozen_copy();
    std::vector<float> before(N), after(N);
    frozen.forward(batch, before.data(), false);
    SpillFile file(tmp.path()), other(tmp.path());
    for (int round = 0; round < 2; ++round) {
      const int64_t rss = current_rss_bytes();
      frozen.offload_weights(file);
      EXPECT_TRUE(frozen.weights_offloaded());
      EXPECT_LT(current_rss_bytes(), rss - (int64_t{4} << 20)) << "round " << round;  // FP8: 5 MiB leave
      EXPECT_NE(testing::error_message([&] { frozen.forward(batch, after.data(), false); }).find("offloaded"),
                std::string::npos);
      EXPECT_NE(testing::error_message([&] { frozen.restore_weights(other); }).find("not offloaded to this file"),
                std::string::npos);
      frozen.restore_weights(file);
      std::fill(after.begin(), after.end(), 0.0f);
      frozen.forward(batch, after.data(), false);
      EXPECT_EQ(std::memcmp(before.data(), after.data(), 4 * N), 0) << "round " << round;
    }
    EXPECT_NE(testing::error_message([&] { frozen.offload_weights(other); }).find("another file"), std::string::npos);
    EXPECT_NE(testing::error_message([&] { model.offload_weights(file); }).find("frozen"), std::string::npos);
  }
  // The file's errors name its directory.
  EXPECT_NE(testing::error_message([&] { SpillFile f(tmp / "missing"); }).find((tmp / "missing").string()),
            std::string::npos);
  SpillFile file(tmp.path());
  char bytes[8] = {};
  EXPECT_NE(testing::error_message([&] { file.read(0, bytes, 8); }).find("the file ends before them"),
            std::string::npos);
}

}  // namespace
}  // namespace fp8rl
