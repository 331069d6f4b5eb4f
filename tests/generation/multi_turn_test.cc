// Multi-turn generation (generation/turn_handler.h): observations prefilled between the model's
// turns are in the response, marked, and the trainer's log-probs of the model's tokens after them
// are the generator's bit for bit; a sample waiting for its answer does not stall the others, and
// when answers arrive does not change any sample's tokens.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "generation/engine.h"
#include "rl/refit.h"
#include "tests/generation/engine_fixtures.h"

namespace fp8rl {
namespace {

using testing::kEos;
using testing::kPad;

// Turns end at a token id of the form 4k + 3 (or eos), a quarter of those sampled; the answer to turn t is the observation {10 + t, 20, 21} until
// turn 3, which ends the sample. With `hold_first`, sequence 0's first answer is given only when
// the engine waits (poll(wait=true)): by then every other sample must be waiting or done.
class ScriptedTurns final : public TurnHandler {
 public:
  explicit ScriptedTurns(bool hold_first) : hold_first_(hold_first) {}

  bool ends_turn(int64_t, std::span<const int32_t> response, size_t) override { return response.back() % 4 == 3; }
  void submit(int64_t s, std::span<const int32_t>) override {
    waiting_.insert(s);
    queue_.push_back({s, ++turns_[s]});
  }
  std::vector<Answer> poll(bool wait) override {
    if (wait) {
      ++waits_;
      // Every running sample waits: sequences neither waiting nor done would be stalled.
      for (int64_t s = 0; s < sequences_; ++s)
        if (!waiting_.contains(s) && !done_.contains(s)) ++stalled_;
      held_released_ = true;
    }
    std::vector<Answer> out;
    for (auto it = queue_.begin(); it != queue_.end();) {
      const auto [s, turn] = *it;
      if (hold_first_ && s == 0 && turn == 1 && !held_released_) {
        ++it;
        continue;
      }
      if (s == 0 && turn == 1) others_done_when_first_answered_ = done_.size();
      Answer a{s, turn >= 3, {}};
      if (!a.done) a.observation = {static_cast<int32_t>(10 + turn), 20, 21};
      if (a.done) done_.insert(s);
      waiting_.erase(s);
      out.push_back(a);
      it = queue_.erase(it);
    }
    return out;
  }

  int64_t sequences_ = 0;
  int64_t waits_ = 0, stalled_ = 0;
  size_t others_done_when_first_answered_ = 0;

 private:
  bool hold_first_;
  bool held_released_ = false;
  std::map<int64_t, int64_t> turns_;
  std::set<int64_t> waiting_, done_;
  std::vector<std::pair<int64_t, int64_t>> queue_;
};

// The trainer's log-probs of the model's tokens (observations are read, never predicted).
std::vector<std::vector<float>> trainer_logprobs(Transformer& t, const std::vector<std::vector<int32_t>>& prompts,
                                                 const std::vector<GeneratedSequence>& seqs) {
  int64_t T = 0;
  for (const auto& s : seqs) T = std::max<int64_t>(T, std::ssize(prompts[static_cast<size_t>(s.prompt_index)]) + std::ssize(s.tokens));
  TokenBatch b = TokenBatch::empty(std::ssize(seqs), T, kPad);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& p = prompts[static_cast<size_t>(seqs[i].prompt_index)];
    std::vector<int32_t> full = p;
    full.insert(full.end(), seqs[i].tokens.begin(), seqs[i].tokens.end());
    std::copy(full.begin(), full.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(T)));
    for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
      if (!seqs[i].observation[j]) b.targets[i * static_cast<size_t>(T) + p.size() - 1 + j] = seqs[i].tokens[j];
    b.lengths[i] = static_cast<int32_t>(full.size());
  }
  std::vector<float> lp(static_cast<size_t>(b.B * T));
  t.forward(b, lp.data(), /*for_backward=*/false);
  std::vector<std::vector<float>> out;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const size_t start = i * static_cast<size_t>(T) + prompts[static_cast<size_t>(seqs[i].prompt_index)].size() - 1;
    out.emplace_back(lp.begin() + static_cast<std::ptrdiff_t>(start),
                     lp.begin() + static_cast<std::ptrdiff_t>(start + seqs[i].tokens.size()));
  }
  return out;
}

struct MultiTurnCase {
  Precision linear, attention;
  bool moe = false;
};

class MultiTurn : public ::testing::TestWithParam<MultiTurnCase> {};

TEST_P(MultiTurn, ObservationsArePrefilledAndTheModelsTokensKeepTheTrainersBits) {
  ModelConfig c = testing::engine_test_config(true);
  c.max_seq_len = 80;
  if (GetParam().moe) c.num_experts = 8, c.experts_per_token = 2, c.d_expert = 128;
  // Flat distributions (sharpen 1): turns end every few tokens, samples after three turns (the
  // budget of 60 tokens is out of reach, so every sample ends by the handler's answer).
  Transformer t = testing::make_sharpened_trainer(c, GetParam().linear, 11, 1.0f, GetParam().attention);
  GenerationEngine e(t.config(), t.policy(), {});
  refit_generator_weights(t, e);
  const auto prompts = testing::make_random_prompts(4, 3);
  const auto run = [&](ScriptedTurns& turns) {
    GenerateOptions o = testing::sampling_options(60, 9);
    turns.sequences_ = 4 * 3;
    o.turns = &turns;
    return e.generate(prompts, 3, o);
  };
  ScriptedTurns held(true), prompt_answers(false);
  const auto seqs = run(held);
  int64_t observations = 0, multi_turn = 0;
  for (const GeneratedSequence& s : seqs) {
    ASSERT_EQ(s.observation.size(), s.tokens.size());
    multi_turn += s.turns >= 2;
    // Each observation follows a turn's end (a token 4k + 3, or eos) and is {10 + turn, 20, 21}.
    for (size_t j = 0, turn = 0; j < s.tokens.size(); ++j) {
      if (!s.observation[j]) continue;
      ++turn;
      ASSERT_TRUE(j >= 1 && !s.observation[j - 1] && (s.tokens[j - 1] % 4 == 3 || s.tokens[j - 1] == kEos));
      ASSERT_EQ(std::vector<int32_t>(s.tokens.begin() + static_cast<std::ptrdiff_t>(j), s.tokens.begin() + static_cast<std::ptrdiff_t>(j + 3)),
                (std::vector<int32_t>{static_cast<int32_t>(10 + turn), 20, 21}));
      EXPECT_EQ(s.logprobs[j], 0.0f);
      observations += 3;
      j += 2;
    }
  }
  EXPECT_EQ(multi_turn, std::ssize(seqs)) << "every sample took its three turns: the test is not vacuous";
  EXPECT_EQ(e.last_stats().observation_tokens, observations);
  const auto prev = trainer_logprobs(t, prompts, seqs);
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t j = 0; j < seqs[i].tokens.size(); ++j)
      if (!seqs[i].observation[j]) {
        ASSERT_EQ(seqs[i].logprobs[j], prev[i][j]) << "sequence " << i << " token " << j;
      }
  // Holding sequence 0's first answer stalled no one: the engine waited only when every running
  // sample waited, the others finished meanwhile, and the samples are the same as without the hold.
  EXPECT_EQ(held.stalled_, 0);
  EXPECT_GT(held.others_done_when_first_answered_, 5u);
  const auto again = run(prompt_answers);
  for (size_t i = 0; i < seqs.size(); ++i) {
    EXPECT_EQ(seqs[i].tokens, again[i].tokens) << "sequence " << i;
    EXPECT_EQ(seqs[i].logprobs, again[i].logprobs) << "sequence " << i;
    EXPECT_EQ(seqs[i].routing, again[i].routing) << "sequence " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, MultiTurn,
                         ::testing::Values(MultiTurnCase{Precision::kBF16, Precision::kBF16},
                                           MultiTurnCase{Precision::kFP8, Precision::kBF16},
                                           MultiTurnCase{Precision::kFP8, Precision::kF32},
                                           MultiTurnCase{Precision::kFP8, Precision::kBF16, /*moe=*/true}),
                         [](const auto& info) {
                           return std::string(info.param.moe ? "moe_" : "") + precision_name(info.param.linear) +
                                  "_attention_" + precision_name(info.param.attention);
                         });

}  // namespace
}  // namespace fp8rl
