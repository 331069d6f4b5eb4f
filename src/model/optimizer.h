// AdamW with FP32 state and decoupled weight decay, global-norm gradient clipping, and
// learning-rate schedules.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/spill_file.h"
#include "model/params.h"

namespace fp8rl {

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;  // decoupled; applied to matrices only (ParamInfo::decay)
  double max_grad_norm = 1.0;  // global-norm clipping; <= 0 disables
};

// Learning rate at optimizer step `step` (0-based): linear warmup over `warmup_steps` to `lr`,
// then constant (kConstant) or cosine decay to `min_lr` at `total_steps` (kCosine).
enum class LrScheduleKind : uint8_t { kConstant, kCosine };  // policy.scheduler.kind: constant | cosine
struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::kConstant;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine only
  double min_lr = 0.0;      // cosine only
  double lr_at(double lr, int64_t step) const;
};

// The elements [begin, end) of the flat parameter array an optimizer updates: all of them, or a
// data-parallel rank's shard (rl/data_parallel.h). A shard starts at a multiple of kAdamWChunk.
struct ParamRange {
  int64_t begin = 0, end = -1;  // end -1: to the last element
};
inline constexpr int64_t kAdamWChunk = int64_t{1} << 16;

enum class Moment : uint8_t { kFirst, kSecond };  // exp_avg, exp_avg_sq

class AdamW {
 public:
  // With a `spill_dir`, the moments live in a spill file there (io/spill_file.h), not in memory,
  // and each step streams them through a chunk at a time (policy.optimizer.offload_moments): their
  // 8 bytes per parameter leave the process for the page cache, which the kernel writes to disk
  // under memory pressure. Each element's arithmetic is the same, and so is every bit.
  AdamW(const ParamLayout& layout, const AdamWConfig& config, ParamRange range = {},
        const std::filesystem::path& spill_dir = {});
  const AdamWConfig& config() const { return config_; }
  int64_t steps_taken() const { return step_; }
  // Leaves the tensors for which `frozen` holds as they are from now on: no update, no decay.
  // (Their gradient is expected to be zero: it still enters the global norm.)
  void freeze(const std::function<bool(const ParamInfo&)>& frozen);

  // One update of params from grads with learning rate `lr`, of the gradient clipped to
  // max_grad_norm (every element times max_norm / norm when norm is larger; `grads` itself is
  // left as it is); returns the pre-clip global norm. A non-finite norm changes nothing and is
  // returned as is, so the caller can count and report the skipped step.
  double step(float* params, const float* grads, double lr);
  // step() in two halves, for a shard: the sums of squares of the gradient over the kAdamWChunk
  // chunks of the range, in order (the global norm is the square root of all chunks' sums added
  // in order); then the update of the range given that norm (clipping included).
  std::vector<double> grad_square_sums(const float* grads) const;
  double step_with_norm(float* params, const float* grads, double lr, double norm);
  // The elements this optimizer updates, and whose moments it holds.
  int64_t begin() const { return begin_; }
  int64_t end() const { return end_; }

  // The moments, for checkpoints: elements [at, at + n) of the parameters' (within [begin, end)),
  // wherever they live.
  bool moments_offloaded() const { return spill_ != nullptr; }
  void read_moment(Moment which, int64_t at, int64_t n, float* dst) const;
  void write_moment(Moment which, int64_t at, int64_t n, const float* src);
  // A moment held in memory ([end - begin]: element i of the parameters at i - begin); not for an
  // optimizer whose moments are offloaded.
  float* moment_data(Moment which);
  void set_steps_taken(int64_t step) { step_ = step; }
  const std::vector<ParamInfo>& tensors() const { return tensors_; }

 private:
  std::vector<ParamInfo> tensors_;
  AdamWConfig config_;
  int64_t begin_ = 0, end_ = 0;
  AlignedBuffer<float> m_, v_;        // in memory, or
  std::unique_ptr<SpillFile> spill_;  // offloaded: m at element i - begin, then v after end - begin
  int64_t spill_offset(Moment which, int64_t at) const;
  void check_moment_range(int64_t at, int64_t n) const;
  int64_t step_ = 0;
};

}  // namespace fp8rl
