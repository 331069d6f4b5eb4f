#include "tasks/task_splits.h"

#include <fmt/format.h>

#include <string>
#include <unordered_set>

#include "core/check.h"

namespace fp8rl {
namespace {

constexpr uint64_t kValidationStream = 1;
constexpr uint64_t kTrainStream = 2;
// Draws allowed per requested example before giving up (only reachable when a split needs most
// of a small problem space; the tasks' own size checks keep that rare).
constexpr int64_t kDrawsPerExample = 200;

}  // namespace

TaskSplits draw_task_splits(uint64_t seed, int64_t train_size, int64_t val_size,
                            const std::function<Example(RandomStream&)>& draw, std::string_view what) {
  TaskSplits s;
  std::unordered_set<std::string> val_prompts;
  RandomStream val_rng(seed, kValidationStream);
  for (int64_t draws = 0; static_cast<int64_t>(s.validation.size()) < val_size; ++draws) {
    if (draws > kDrawsPerExample * val_size)
      throw Error(fmt::format("{}: could not draw {} distinct validation prompts; lower val_size", what, val_size));
    Example e = draw(val_rng);
    if (val_prompts.insert(e.prompt).second) s.validation.push_back(std::move(e));
  }
  RandomStream train_rng(seed, kTrainStream);
  s.train.reserve(static_cast<size_t>(train_size));
  for (int64_t draws = 0; static_cast<int64_t>(s.train.size()) < train_size; ++draws) {
    if (draws > kDrawsPerExample * train_size)
      throw Error(fmt::format("{}: could not draw train prompts outside the validation split; lower val_size", what));
    Example e = draw(train_rng);
    if (!val_prompts.contains(e.prompt)) s.train.push_back(std::move(e));
  }
  return s;
}

}  // namespace fp8rl
