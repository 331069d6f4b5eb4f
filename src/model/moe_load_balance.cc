#include "model/moe_load_balance.h"

#include "core/check.h"

namespace fp8rl {

void LoadBalanceStats::reset() {
  experts_ = 0, decisions_ = 0;
  count_.clear();
  prob_sum_.clear();
}

void LoadBalanceStats::add_layer(const MoeRouting& r, const uint8_t* is_real) {
  if (experts_ == 0) {
    experts_ = r.E;
    count_.assign(static_cast<size_t>(r.E), 0);
    prob_sum_.assign(static_cast<size_t>(r.E), 0.0);
  }
  FP8RL_CHECK(r.E == experts_, "load balance: a layer with {} experts after layers with {}", r.E, experts_);
  for (int64_t n = 0; n < r.N; ++n) {
    if (is_real != nullptr && !is_real[n]) continue;
    ++decisions_;
    for (int64_t j = 0; j < r.k; ++j) ++count_[static_cast<size_t>(r.expert[static_cast<size_t>(n * r.k + j)])];
    for (int64_t e = 0; e < r.E; ++e) prob_sum_[static_cast<size_t>(e)] += r.probs[static_cast<size_t>(n * r.E + e)];
  }
}

double LoadBalanceStats::loss() const {
  if (decisions_ == 0) return 0.0;
  const double d = static_cast<double>(decisions_);
  double sum = 0.0;
  for (int64_t e = 0; e < experts_; ++e)
    sum += static_cast<double>(count_[static_cast<size_t>(e)]) / d * (prob_sum_[static_cast<size_t>(e)] / d);
  return static_cast<double>(experts_) * sum;
}

std::vector<float> LoadBalanceStats::dprobs(double weight) const {
  std::vector<float> g(static_cast<size_t>(experts_), 0.0f);
  if (decisions_ == 0) return g;
  const double d = static_cast<double>(decisions_);
  for (int64_t e = 0; e < experts_; ++e)
    g[static_cast<size_t>(e)] = static_cast<float>(weight * static_cast<double>(experts_) *
                                                   static_cast<double>(count_[static_cast<size_t>(e)]) / (d * d));
  return g;
}

}  // namespace fp8rl
