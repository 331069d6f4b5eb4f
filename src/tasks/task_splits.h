// The train and validation splits of the built-in tasks, drawn the same way for each: from
// separate Philox streams of the task's seed, so that the splits are deterministic functions of
// the config and the validation split does not change when train_size does.
//   * validation: `val_size` distinct prompts (stream 1);
//   * train: `train_size` prompts (stream 2) with every validation prompt rejected (disjoint; a
//     prompt may repeat in small problem spaces; a longer train split starts with the shorter one).
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "core/rng.h"
#include "tasks/task.h"

namespace fp8rl {

struct TaskSplits {
  std::vector<Example> train;
  std::vector<Example> validation;
};

// Draws both splits with `draw`. Throws Error, prefixed with `what` (e.g. "arithmetic task
// config"), when the space is too small for them (200 draws per example without success).
TaskSplits draw_task_splits(uint64_t seed, int64_t train_size, int64_t val_size,
                            const std::function<Example(RandomStream&)>& draw, std::string_view what);

}  // namespace fp8rl
