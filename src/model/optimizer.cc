#include "model/optimizer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/simd/lane_sums.h"

namespace fp8rl {

double LrSchedule::lr_at(double lr, int64_t step) const {
  if (warmup_steps > 0 && step < warmup_steps) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  if (kind == LrScheduleKind::kConstant) return lr;
  const double span = static_cast<double>(std::max<int64_t>(1, total_steps - warmup_steps));
  const double progress = std::min(1.0, static_cast<double>(step - warmup_steps) / span);
  return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(3.14159265358979323846 * progress));
}

namespace {

// Elements per task of the optimizer's loops: fixed, so the sums below (per chunk, then over the
// chunks in order) and every update are the same for any thread count.
constexpr int64_t kChunk = kAdamWChunk;

int64_t chunks_of(int64_t n) { return (n + kChunk - 1) / kChunk; }

// The AdamW update of n elements (the arrays do not overlap, which lets the loop vectorize), of
// the gradient times grad_scale (global-norm clipping; 1 when it does not clip, an exact product),
// so that clipping costs no pass of its own over the gradient.
struct AdamWStep {
  float b1, b2, step_size, inv_sqrt_bias2, eps, decay, grad_scale;
};
void adamw_update(float* __restrict p, const float* __restrict g, float* __restrict m, float* __restrict v, int64_t n,
                  const AdamWStep& k) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i] * k.grad_scale;
    m[i] = k.b1 * m[i] + (1.0f - k.b1) * gi;
    v[i] = k.b2 * v[i] + (1.0f - k.b2) * gi * gi;
    // Decoupled decay (Loshchilov & Hutter): p <- p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps)
    p[i] = p[i] * k.decay - k.step_size * m[i] / (std::sqrt(v[i]) * k.inv_sqrt_bias2 + k.eps);
  }
}

}  // namespace

AdamW::AdamW(const ParamLayout& layout, const AdamWConfig& config, ParamRange range,
             const std::filesystem::path& spill_dir)
    : tensors_(layout.tensors()),
      config_(config),
      begin_(range.begin),
      end_(range.end < 0 ? layout.numel() : range.end) {
  FP8RL_CHECK(begin_ >= 0 && begin_ <= end_ && end_ <= layout.numel() && begin_ % kChunk == 0,
              "AdamW: range [{}, {}) of {} parameters (it must start at a multiple of {})", begin_, end_,
              layout.numel(), kChunk);
  if (spill_dir.empty()) {
    m_ = AlignedBuffer<float>(static_cast<size_t>(end_ - begin_));
    v_ = AlignedBuffer<float>(static_cast<size_t>(end_ - begin_));
  } else {  // zeros, as a file of that length reads
    spill_ = std::make_unique<SpillFile>(spill_dir);
    spill_->resize(spill_offset(Moment::kSecond, end_));
  }
}

int64_t AdamW::spill_offset(Moment which, int64_t at) const {
  const int64_t element = (which == Moment::kFirst ? 0 : end_ - begin_) + (at - begin_);
  return element * static_cast<int64_t>(sizeof(float));
}

float* AdamW::moment_data(Moment which) {
  FP8RL_CHECK(!moments_offloaded(), "AdamW::moment_data: the moments are in a spill file, not in memory");
  return (which == Moment::kFirst ? m_ : v_).data();
}

void AdamW::check_moment_range(int64_t at, int64_t n) const {
  FP8RL_CHECK(at >= begin_ && n >= 0 && at + n <= end_, "AdamW: moment elements [{}, {}) outside [{}, {})", at, at + n,
              begin_, end_);
}

void AdamW::read_moment(Moment which, int64_t at, int64_t n, float* dst) const {
  check_moment_range(at, n);
  if (spill_) return spill_->read(spill_offset(which, at), dst, static_cast<size_t>(n) * sizeof(float));
  const float* src = (which == Moment::kFirst ? m_ : v_).data() + (at - begin_);
  std::copy(src, src + n, dst);
}

void AdamW::write_moment(Moment which, int64_t at, int64_t n, const float* src) {
  check_moment_range(at, n);
  if (spill_) return spill_->write(spill_offset(which, at), src, static_cast<size_t>(n) * sizeof(float));
  std::copy(src, src + n, (which == Moment::kFirst ? m_ : v_).data() + (at - begin_));
}

void AdamW::freeze(const std::function<bool(const ParamInfo&)>& frozen) { std::erase_if(tensors_, frozen); }

std::vector<double> AdamW::grad_square_sums(const float* grads) const {
  std::vector<double> partial(static_cast<size_t>(chunks_of(end_ - begin_)), 0.0);
  parallel_for_ranges(end_ - begin_, kChunk, [&](int64_t b, int64_t e) {
    const float* g = grads + begin_ + b;
    partial[static_cast<size_t>(b / kChunk)] = sum_products_f64(g, g, nullptr, e - b);
  });
  return partial;
}

double AdamW::step(float* params, const float* grads, double lr) {
  double sum = 0.0;
  for (double p : grad_square_sums(grads)) sum += p;
  return step_with_norm(params, grads, lr, std::sqrt(sum));
}

double AdamW::step_with_norm(float* params, const float* grads, double lr, double norm) {
  if (!std::isfinite(norm)) return norm;
  const float grad_scale = config_.max_grad_norm > 0 && norm > config_.max_grad_norm
                               ? static_cast<float>(config_.max_grad_norm / norm)
                               : 1.0f;
  ++step_;
  const double bias1 = 1.0 - std::pow(config_.beta1, static_cast<double>(step_));
  const double bias2 = 1.0 - std::pow(config_.beta2, static_cast<double>(step_));
  const float b1 = static_cast<float>(config_.beta1), b2 = static_cast<float>(config_.beta2);
  const float step_size = static_cast<float>(lr / bias1);
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  const float eps = static_cast<float>(config_.eps);
  // One task per chunk of one tensor, within the range (every element's update is independent
  // of the others): elements [begin, end) with the tensor's decay.
  struct Task {
    int64_t begin, end;
    float decay;
  };
  std::vector<Task> tasks;
  for (const ParamInfo& t : tensors_) {
    const float decay = t.decay ? static_cast<float>(1.0 - lr * config_.weight_decay) : 1.0f;
    for (int64_t c = 0; c < chunks_of(t.shape.numel()); ++c) {
      const int64_t begin = std::max(begin_, t.offset + c * kChunk);
      const int64_t end = std::min(end_, t.offset + std::min(t.shape.numel(), (c + 1) * kChunk));
      if (begin < end) tasks.push_back({begin, end, decay});
    }
  }
  const auto update = [&](const Task& task, float* m, float* v) {
    adamw_update(params + task.begin, grads + task.begin, m, v, task.end - task.begin,
                 {b1, b2, step_size, inv_sqrt_bias2, eps, task.decay, grad_scale});
  };
  if (!spill_) {
    kernel_thread_pool().parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t i) {
      const Task& task = tasks[static_cast<size_t>(i)];
      update(task, m_.data() + (task.begin - begin_), v_.data() + (task.begin - begin_));
    });
    return norm;
  }
  // Offloaded: each thread reads a chunk's moments into its own buffers, updates, writes them back.
  std::atomic<size_t> next{0};
  kernel_thread_pool().parallel_for(kernel_thread_pool().size(), [&](int64_t) {
    AlignedBuffer<float> m(static_cast<size_t>(kChunk)), v(static_cast<size_t>(kChunk));
    for (size_t i; (i = next.fetch_add(1)) < tasks.size();) {
      const Task& task = tasks[i];
      const int64_t n = task.end - task.begin;
      read_moment(Moment::kFirst, task.begin, n, m.data());
      read_moment(Moment::kSecond, task.begin, n, v.data());
      update(task, m.data(), v.data());
      write_moment(Moment::kFirst, task.begin, n, m.data());
      write_moment(Moment::kSecond, task.begin, n, v.data());
    }
  });
  return norm;
}

}  // namespace fp8rl
