#include "rl/multi_turn.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"

namespace fp8rl {

EnvironmentTurns::EnvironmentTurns(Environment& environment, const EnvironmentConfig& config, const Tokenizer& tokenizer,
                                   std::vector<const Example*> examples, int64_t samples_per_prompt,
                                   std::string id_prefix, int64_t first_prompt)
    : env_(environment),
      config_(config),
      tok_(tokenizer),
      examples_(std::move(examples)),
      G_(samples_per_prompt),
      first_prompt_(first_prompt),
      prefix_(std::move(id_prefix)),
      turns_(examples_.size(), 0),
      after_eos_(examples_.size(), 0),
      rewards_(examples_.size()) {}

bool EnvironmentTurns::ends_turn(int64_t, std::span<const int32_t> response, size_t turn_begin) {
  if (config_.stop.empty()) return false;
  const std::string text = tok_.decode_transcript(response.subspan(turn_begin));
  return std::any_of(config_.stop.begin(), config_.stop.end(),
                     [&](const std::string& stop) { return !stop.empty() && text.ends_with(stop); });
}

void EnvironmentTurns::submit(int64_t s, std::span<const int32_t> response) {
  const size_t i = static_cast<size_t>(s);
  const int64_t turn = ++turns_[i];
  after_eos_[i] = !response.empty() && response.back() == tok_.eos();
  const std::string id = fmt::format("{}/p{}/g{}/t{}", prefix_, first_prompt_ + s / G_, s % G_, turn);
  env_.submit(id, s, turn, *examples_[i], tok_.decode_transcript(response));
  outstanding_.emplace_back(id, s);
}

std::vector<TurnHandler::Answer> EnvironmentTurns::poll(bool wait) {
  std::vector<Answer> answers;
  for (EnvironmentReply& r : env_.poll(wait)) {
    const auto it = std::find_if(outstanding_.begin(), outstanding_.end(), [&](const auto& o) { return o.first == r.id; });
    FP8RL_CHECK(it != outstanding_.end(), "an environment reply for '{}', which was not asked", r.id);
    const int64_t s = it->second;
    outstanding_.erase(it);
    Answer a{s, r.done, {}};
    if (r.done) {
      rewards_[static_cast<size_t>(s)] = r.reward;
    } else if (turns_[static_cast<size_t>(s)] >= config_.max_turns) {
      a.done = true;  // task.environment.max_turns answers given: the sample ends, task.reward scores it
    } else {
      try {
        a.observation = tok_.encode_observation(r.observation, after_eos_[static_cast<size_t>(s)] != 0);
      } catch (const Error& e) {
        env_.reject(r.id, fmt::format("its observation cannot be encoded: {}", e.what()));
      }
    }
    answers.push_back(std::move(a));
  }
  return answers;
}

}  // namespace fp8rl
