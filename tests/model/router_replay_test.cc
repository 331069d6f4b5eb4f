// Router replay in the trainer (TokenBatch::experts, policy.router_replay): the replayed experts
// are the ones the MoE layers use, replaying the router's own choice changes no bit, the prefix
// forward replays as the padded one does (a shared prompt with different records included), and
// a malformed record is refused.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/check.h"
#include "arch/config.h"
#include "model/transformer.h"

namespace fp8rl {
namespace {

// tiny-moe at a small vocabulary; two sequences sharing a three-token prompt, right-padded.
ModelConfig replay_config() { return model_preset("tiny-moe", 40); }

TokenBatch replay_batch() {
  TokenBatch b = TokenBatch::empty(2, 7, 0);
  const std::vector<std::vector<int32_t>> seqs = {{1, 5, 9, 12, 3, 30, 7}, {1, 5, 9, 20, 21}};
  for (size_t s = 0; s < seqs.size(); ++s) {
    for (size_t t = 0; t < seqs[s].size(); ++t) {
      b.tokens[s * 7 + t] = seqs[s][t];
      if (t + 1 < seqs[s].size()) b.targets[s * 7 + t] = seqs[s][t + 1];
    }
    b.lengths[s] = static_cast<int32_t>(seqs[s].size());
  }
  return b;
}

// The model's own routing of the last forward as a TokenBatch::experts record ([N, layers, k]).
std::vector<int32_t> record_of(const Transformer& model) {
  const std::vector<std::vector<int32_t>>& routing = model.last_routing();
  const int64_t L = static_cast<int64_t>(routing.size()), k = model.config().experts_per_token;
  const int64_t N = static_cast<int64_t>(routing.front().size()) / k;
  std::vector<int32_t> record(static_cast<size_t>(N * L * k));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t l = 0; l < L; ++l)
      for (int64_t j = 0; j < k; ++j)
        record[static_cast<size_t>((n * L + l) * k + j)] =
            routing[static_cast<size_t>(l)][static_cast<size_t>(n * k + j)];
  return record;
}

class RouterReplay : public ::testing::TestWithParam<Precision> {};

TEST_P(RouterReplay, ReplayedExpertsAreUsedAndTheRoutersOwnChoiceChangesNoBit) {
  PrecisionPolicy policy;
  policy.linear = GetParam();
  Transformer model(replay_config(), policy);
  model.init_random(3);
  TokenBatch batch = replay_batch();
  const size_t N = static_cast<size_t>(batch.B * batch.T);
  std::vector<float> own(N), replayed(N), other(N);
  model.forward(batch, own.data());
  const std::vector<std::vector<int32_t>> own_routing = model.last_routing();
  const std::vector<int32_t> record = record_of(model);

  // The router's own choice replayed: the same bits, with and without a backward's saved state.
  batch.experts = record;
  model.forward(batch, replayed.data());
  EXPECT_EQ(replayed, own);
  model.forward(batch, replayed.data(), /*for_backward=*/false);
  EXPECT_EQ(replayed, own);

  // Other experts (each slot moved to the next expert) in every row of the second sequence:
  // its log-probs change, the first sequence's do not, and last_routing() still reports what
  // the router would have chosen (the first layer's, as before; later layers' see the replayed
  // layers' outputs in the second sequence).
  const int64_t E = model.config().num_experts, width = static_cast<int64_t>(record.size() / N);
  const size_t k = static_cast<size_t>(model.config().experts_per_token);
  for (size_t i = 7 * static_cast<size_t>(width); i < record.size(); ++i)
    batch.experts[i] = static_cast<int32_t>((record[i] + 1) % E);
  model.forward(batch, other.data());
  EXPECT_EQ(model.last_routing().front(), own_routing.front());
  for (size_t l = 1; l < own_routing.size(); ++l)
    EXPECT_EQ(std::vector<int32_t>(model.last_routing()[l].begin(), model.last_routing()[l].begin() + 7 * k),
              std::vector<int32_t>(own_routing[l].begin(), own_routing[l].begin() + 7 * k));
  for (size_t n = 0; n < 7; ++n) EXPECT_EQ(other[n], own[n]) << "row " << n;
  int changed = 0;
  for (size_t n = 7; n < 11; ++n) changed += other[n] != own[n];
  EXPECT_EQ(changed, 4) << "every scored row of the replayed sequence moves";

  // The prefix forward replays as the padded one: the two sequences share their prompt's tokens
  // but not its record, so the prompt rows are not shared.
  std::vector<float> prefix(N);
  model.prefix_logprobs(batch, prefix.data());
  EXPECT_EQ(prefix, other);
}

INSTANTIATE_TEST_SUITE_P(Linears, RouterReplay, ::testing::Values(Precision::kBF16, Precision::kFP8),
                         [](const auto& info) { return std::string(precision_name(info.param)); });

TEST(RouterReplayErrors, AMalformedRecordIsRefused) {
  Transformer model(replay_config(), PrecisionPolicy{});
  model.init_random(3);
  TokenBatch batch = replay_batch();
  std::vector<float> lp(static_cast<size_t>(batch.B * batch.T));
  const auto expect_error = [&](const TokenBatch& b, const std::string& what) {
    try {
      model.forward(b, lp.data());
      ADD_FAILURE() << "accepted: " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  const ModelConfig& c = model.config();
  batch.experts.assign(static_cast<size_t>(batch.B * batch.T * c.num_moe_layers() * c.experts_per_token - 1), -1);
  expect_error(batch, "router replay needs B*T x MoE layers x k");
  batch.experts.push_back(-1);
  batch.experts[0] = 2, batch.experts[1] = 2;
  expect_error(batch, "router replay: token 0 slot 1 names expert 2");

  Transformer dense(model_preset("tiny", 40), PrecisionPolicy{});
  batch.experts.assign(static_cast<size_t>(batch.B * batch.T * 2), -1);
  try {
    dense.forward(batch, lp.data());
    ADD_FAILURE() << "a dense model accepted a replay record";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the model has no MoE layers"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fp8rl
