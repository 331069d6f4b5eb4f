// Whole-model finite-difference gradient check in the FP32 reference mode, with and without
// q/k-norm and tied embeddings; and the BF16 / FP8 modes stay close to FP32.
// ctest-file-label: quick
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"
#include "tests/grad_check.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

ModelConfig micro_config(bool qk_norm, bool tied) {
  ModelConfig c;
  c.preset = "micro";
  c.vocab_size = 11, c.d_model = 16, c.n_layers = 2, c.n_heads = 2, c.n_kv_heads = 1, c.head_dim = 8;
  c.d_ff = 24, c.max_seq_len = 8, c.qk_norm = qk_norm, c.tie_embeddings = tied;
  return c;
}

TokenBatch micro_batch() {
  TokenBatch b = TokenBatch::empty(2, 6, 0);
  const int32_t toks[12] = {1, 4, 2, 9, 3, 5, 7, 7, 10, 2, 0, 0};
  for (int i = 0; i < 12; ++i) b.tokens[static_cast<size_t>(i)] = toks[i];
  for (int i = 0; i < 11; ++i) b.targets[static_cast<size_t>(i)] = i % 6 == 5 ? -1 : toks[i + 1];
  b.targets[9] = b.targets[10] = -1;  // sequence 1 has 4 real tokens; its last scored target is row 8
  b.lengths = {6, 4};
  return b;
}

void expect_fp32_gradients_match_finite_differences(const ModelConfig& config) {
  Transformer model(config, PrecisionPolicy::fp32());
  model.init_random(3);
  // Larger weights than the default init make the model nonlinear enough to test every path.
  for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 10.0f;
  for (const ParamInfo& p : model.layout().tensors())
    if (p.shape.rank == 1) fill_uniform(model.params() + p.offset, p.shape.numel(), 0.5f, 1.5f, 9, static_cast<uint64_t>(p.offset));
  model.refresh_weights();
  const TokenBatch batch = micro_batch();
  const int64_t N = batch.B * batch.T;
  std::vector<float> coeff(static_cast<size_t>(N)), lp(static_cast<size_t>(N));
  fill_uniform(coeff.data(), N, -1.0f, 1.0f, 5, 0);
  auto loss = [&] {
    model.refresh_weights();
    model.forward(batch, lp.data());
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += static_cast<double>(coeff[static_cast<size_t>(n)]) * lp[static_cast<size_t>(n)];
    return s;
  };
  model.zero_grads();
  loss();
  model.backward(coeff.data());
  const std::vector<float> grads(model.grads(), model.grads() + model.num_params());
  for (const ParamInfo& p : model.layout().tensors()) {
    const int64_t n = p.shape.numel();
    testing::expect_gradient_matches(p.name, model.params() + p.offset, n, grads.data() + p.offset, loss, 1e-2, 2e-3,
                                     2e-2, std::max<int64_t>(1, n / 24));
  }
}

class TransformerGrad : public ::testing::TestWithParam<std::pair<bool, bool>> {};

TEST_P(TransformerGrad, FiniteDifferencesAgreeInFp32) {
  const auto [qk_norm, tied] = GetParam();
  expect_fp32_gradients_match_finite_differences(micro_config(qk_norm, tied));
}

// Qwen3-MoE: layer 0 dense (mlp_only_layers), layer 1 with 4 experts, 2 per token; with and
// without renormalized top-k weights.
TEST(TransformerGradMoe, FiniteDifferencesAgreeInFp32) {
  for (bool norm : {true, false}) {
    ModelConfig c = micro_config(true, true);
    c.num_experts = 4, c.experts_per_token = 2, c.d_expert = 12, c.norm_topk_prob = norm, c.mlp_only_layers = {0};
    SCOPED_TRACE(norm ? "norm_topk_prob" : "plain top-k weights");
    expect_fp32_gradients_match_finite_differences(c);
  }
}

// Qwen2: biases on q, k and v (their gradients are the column sums of the projections' dy).
TEST(TransformerGradQwen2, FiniteDifferencesAgreeInFp32) {
  for (bool tied : {true, false}) {
    ModelConfig c = micro_config(false, tied);
    c.qkv_bias = true;
    SCOPED_TRACE(tied ? "tied" : "untied");
    expect_fp32_gradients_match_finite_differences(c);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, TransformerGrad,
                         ::testing::Values(std::make_pair(false, true), std::make_pair(true, true),
                                           std::make_pair(true, false)));

TEST(Transformer, LowPrecisionModesStayCloseToFp32) {
  ModelConfig c = micro_config(true, true);
  c.d_model = 128, c.d_ff = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32, c.vocab_size = 40;
  const TokenBatch batch = micro_batch();
  const int64_t N = batch.B * batch.T;
  Transformer ref(c, PrecisionPolicy::fp32());
  ref.init_random(11);
  std::vector<float> want(static_cast<size_t>(N));
  ref.forward(batch, want.data());
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    PrecisionPolicy policy;
    policy.linear = linear;
    Transformer model(c, policy);
    std::copy(ref.params(), ref.params() + ref.num_params(), model.params());
    model.refresh_weights();
    std::vector<float> got(static_cast<size_t>(N));
    model.forward(batch, got.data());
    for (int64_t n = 0; n < N; ++n) {
      // Log-probs near log(1/V) = -3.7: BF16 activations and E4M3 linears move them by at most a
      // few hundredths with these small random weights.
      EXPECT_NEAR(got[static_cast<size_t>(n)], want[static_cast<size_t>(n)], linear == Precision::kFP8 ? 0.05 : 0.02)
          << precision_name(linear) << " row " << n;
    }
  }
}


// qkv_amax() is the calibration of a full forward, bit for bit: 3 layers (the last one stops
// after q/k/v), 128-wide rows (real FP8 1x128 blocks), padding, duplicated sequences, sequences
// that share a prompt or are a prefix of another, an empty one, and non-default positions. It
// leaves the last forward's state alone: backward afterwards gives the same gradients.
TEST(Transformer, QkvAmaxEqualsTheFullForwardsCalibration) {
  const int32_t seqs[][9] = {
      {1, 4, 2, 9, 3, 5, 7, 7, 10}, {1, 4, 2, 9, 3, 5, 7, 7, 10}, {1, 4, 2, 9, 3, 6, 0, 0, 0},
      {1, 4, 2, 9, 3, 6, 8, 0, 0},  {1, 4, 2, 0, 0, 0, 0, 0, 0},  {0, 0, 0, 0, 0, 0, 0, 0, 0},
      {2, 4, 2, 9, 3, 6, 8, 0, 0},  {1, 4, 2, 9, 3, 5, 7, 7, 10},
  };
  const int32_t lengths[] = {9, 9, 6, 7, 3, 0, 7, 9};
  TokenBatch batch = TokenBatch::empty(8, 9, 0);
  for (int64_t b = 0; b < batch.B; ++b) {
    batch.lengths[static_cast<size_t>(b)] = lengths[b];
    for (int64_t t = 0; t < batch.T; ++t) {
      const size_t row = static_cast<size_t>(b * batch.T + t);
      batch.tokens[row] = seqs[b][t] % 40;
      if (t + 1 < lengths[b]) batch.targets[row] = seqs[b][t + 1];
    }
  }
  for (int64_t t = 0; t < batch.T; ++t) batch.positions[static_cast<size_t>(7 * batch.T + t)] = static_cast<int32_t>(t + 2);
  TokenBatch other = batch;  // a different batch for the calibration between forward and backward
  other.tokens[3] = 17;
  for (bool qk_norm : {false, true}) {
    ModelConfig c = micro_config(qk_norm, true);
    c.d_model = 128, c.d_ff = 256, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
    c.vocab_size = 40, c.max_seq_len = 16;
    for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
      PrecisionPolicy policy;
      policy.linear = linear;
      Transformer model(c, policy);
      model.init_random(11);
      for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] *= 5.0f;  // larger, more varied amax
      model.refresh_weights();
      const int64_t N = batch.B * batch.T;
      std::vector<float> lp(static_cast<size_t>(N)), coeff(static_cast<size_t>(N), 0.5f);
      auto grads_after = [&](bool calibrate_in_between) {
        model.zero_grads();
        model.forward(batch, lp.data());
        if (calibrate_in_between) model.qkv_amax(other);
        model.backward(coeff.data());
        return std::vector<float>(model.grads(), model.grads() + model.num_params());
      };
      const std::vector<float> plain = grads_after(false);
      const std::vector<Transformer::QkvAmax> want = model.last_qkv_amax();
      const std::vector<Transformer::QkvAmax> got = model.qkv_amax(batch);
      ASSERT_EQ(got.size(), want.size());
      for (size_t l = 0; l < want.size(); ++l) {
        const std::string where = std::string(precision_name(linear)) + (qk_norm ? " qk_norm" : "") + " layer " + std::to_string(l);
        EXPECT_GT(want[l].q, 0.0f) << where;
        EXPECT_EQ(want[l].k_heads.size(), static_cast<size_t>(c.n_kv_heads)) << where;
        EXPECT_TRUE(got[l] == want[l])  // exact, per head too
            << where << ": q " << got[l].q << " vs " << want[l].q << ", k " << got[l].k << " vs " << want[l].k
            << ", v " << got[l].v << " vs " << want[l].v;
      }
      const std::vector<float> with_calibration = grads_after(true);
      EXPECT_EQ(std::memcmp(plain.data(), with_calibration.data(), plain.size() * sizeof(float)), 0);
      EXPECT_TRUE(model.last_qkv_amax() == want);
    }
  }
}

// A log-probs-only forward (for_backward false, as GRPO's reference model and greedy evaluation
// run it) gives the same log-probs without the FP8 column-wise copies; with FP8 linears a
// backward after it is refused, naming the linear.
TEST(Transformer, ForwardWithoutBackwardGivesTheSameLogprobs) {
  ModelConfig c = micro_config(false, true);
  c.d_model = 128, c.d_ff = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
  const TokenBatch batch = micro_batch();
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    PrecisionPolicy policy;
    policy.linear = linear;
    Transformer model(c, policy);
    model.init_random(5);
    const int64_t N = batch.B * batch.T;
    std::vector<float> saved(static_cast<size_t>(N)), plain(saved.size()), coeff(saved.size(), 1.0f);
    model.forward(batch, saved.data());
    model.forward(batch, plain.data(), /*for_backward=*/false);
    EXPECT_EQ(0, std::memcmp(saved.data(), plain.data(), saved.size() * 4)) << precision_name(linear);
    if (linear == Precision::kFP8) {
      const std::string message = testing::error_message([&] { model.backward(coeff.data()); });
      EXPECT_NE(message.find("backward after a forward that did not save for backward"), std::string::npos) << message;
    }
  }
}

// The gradient contract (transformer.h): two micro-batches' gradient is the fold, in order, of
// each one's dense term (formed from zero) and embedding-row term, which is what the
// data-parallel reduction adds on another process (rl/data_parallel.h). Tied embeddings, repeated tokens.
TEST(Transformer, MicroBatchGradientsAreAFoldOfTheirTerms) {
  ModelConfig c = micro_config(true, true);
  c.d_model = 128, c.d_ff = 256, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
  const TokenBatch first = micro_batch();
  const TokenBatch second = [] {
    TokenBatch b = micro_batch();
    b.tokens[1] = 7, b.tokens[4] = 1;  // other tokens, some shared with the first
    return b;
  }();
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    PrecisionPolicy policy;
    policy.linear = linear;
    Transformer model(c, policy);
    model.init_random(3);
    const int64_t N = 12, P = model.num_params();
    std::vector<float> lp(static_cast<size_t>(N)), coeff(static_cast<size_t>(N));
    for (int64_t n = 0; n < N; ++n) coeff[static_cast<size_t>(n)] = 0.1f * static_cast<float>(n % 5) - 0.2f;
    model.zero_grads();
    for (const TokenBatch* b : {&first, &second}) {
      model.forward(*b, lp.data());
      model.backward(coeff.data());
    }
    const std::vector<float> in_place(model.grads(), model.grads() + P);

    std::vector<float> folded(static_cast<size_t>(P), 0.0f);
    for (const TokenBatch* b : {&first, &second}) {
      model.zero_grads();
      model.forward(*b, lp.data());
      EmbeddingRowGrads rows;
      model.backward(coeff.data(), &rows);
      for (int64_t i = 0; i < P; ++i) folded[static_cast<size_t>(i)] += model.grads()[i];  // the dense term
      std::copy(folded.begin(), folded.end(), model.grads());
      model.add_embedding_rows(rows);  // then the rows' term
      std::copy(model.grads(), model.grads() + P, folded.begin());
    }
    EXPECT_EQ(0, std::memcmp(in_place.data(), folded.data(), in_place.size() * sizeof(float))) << precision_name(linear);
  }
}

// zero_grads() only marks the buffer: the next backward writes the linears' and the LM head's
// products and clears the other tensors. The bits are those of adding every term to zeros, whatever
// the buffer held (NaN here), for a dense and an MoE model (whose experts and router are cleared
// and added to), tied and untied embeddings, each linear precision.
TEST(Transformer, FirstBackwardWritesWhatAddingToZerosGives) {
  ModelConfig moe = micro_config(true, true);
  moe.num_experts = 4, moe.experts_per_token = 2, moe.d_expert = 12, moe.mlp_only_layers = {0};
  for (const ModelConfig& c : {micro_config(true, true), micro_config(false, false), moe})
    for (Precision linear : {Precision::kF32, Precision::kBF16, Precision::kFP8}) {
      SCOPED_TRACE(fmt::format("{} experts, tied {}, {}", c.num_experts, c.tie_embeddings, precision_name(linear)));
      PrecisionPolicy policy;
      policy.linear = linear;
      Transformer model(c, policy);
      model.init_random(3);
      const TokenBatch batch = micro_batch();
      const int64_t N = batch.B * batch.T, P = model.num_params();
      std::vector<float> lp(static_cast<size_t>(N)), coeff(static_cast<size_t>(N));
      fill_uniform(coeff.data(), N, -1.0f, 1.0f, 5, 0);
      auto gradients = [&](bool clear_first) {
        std::fill(model.grads(), model.grads() + P, std::nanf(""));
        model.zero_grads();
        if (clear_first) model.grads();  // cleared now: backward adds its terms to zeros
        model.forward(batch, lp.data());
        model.backward(coeff.data());
        return std::vector<float>(model.grads(), model.grads() + P);
      };
      const std::vector<float> written = gradients(false), added = gradients(true);
      EXPECT_EQ(0, std::memcmp(written.data(), added.data(), written.size() * sizeof(float)));
      EXPECT_TRUE(std::all_of(added.begin(), added.end(), [](float g) { return std::isfinite(g); }));
    }
}

}  // namespace
}  // namespace fp8rl
