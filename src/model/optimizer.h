// AdamW with FP32 state and decoupled weight decay, global-norm gradient clipping, and
// learning-rate schedules.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
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
// then constant ("constant") or cosine decay to `min_lr` at `total_steps` ("cosine").
struct LrSchedule {
  std::string kind = "constant";  // "constant" | "cosine"
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;  // cosine only
  double min_lr = 0.0;      // cosine only
  double lr_at(double lr, int64_t step) const;
};

// sqrt(sum g^2) over all gradients, accumulated in double (NaN/Inf propagate).
double global_grad_norm(const float* grads, int64_t n);

class AdamW {
 public:
  AdamW(const ParamLayout& layout, const AdamWConfig& config);
  const AdamWConfig& config() const { return config_; }
  int64_t steps_taken() const { return step_; }

  // One update of params from grads with learning rate `lr`: clips grads in place to
  // max_grad_norm (scaling all of them by max_norm / norm when norm is larger) and returns the
  // pre-clip global norm. A non-finite norm changes nothing and is returned as is, so the caller
  // can count and report the skipped step.
  double step(float* params, float* grads, double lr);

  // The moments, for checkpoints ([numel] each, same layout as the parameters).
  AlignedBuffer<float>& first_moment() { return m_; }
  AlignedBuffer<float>& second_moment() { return v_; }
  void set_steps_taken(int64_t step) { step_ = step; }
  const std::vector<ParamInfo>& tensors() const { return tensors_; }

 private:
  std::vector<ParamInfo> tensors_;
  AdamWConfig config_;
  AlignedBuffer<float> m_, v_;
  int64_t step_ = 0;
};

}  // namespace fp8rl
