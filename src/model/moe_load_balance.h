// The load-balancing loss of a Mixture-of-Experts model (Switch Transformer's; the definition of
// Hugging Face's Qwen3-MoE `load_balancing_loss_func`), over the real tokens of one forward with
// every MoE layer's decisions pooled:
//
//   aux = E * sum_e f_e * P_e
//   f_e = (the (token, layer, slot) choices of expert e) / (L N)     the load it takes
//   P_e = (sum over (token, layer) of p_e) / (L N)                   the probability it gets
//
// L MoE layers, N real tokens, E experts, k per token, p the router's softmax. Uniform routing
// gives aux = k; the more the load concentrates, the larger it is. f counts the experts a token
// actually went to (with router replay, the replayed ones) and is piecewise constant, so the
// gradient flows through P only: d aux / d p_e = E f_e / (L N) at every counted (token, layer).
// policy.aux_loss_coef weights it into the training loss (default 0, as RL trainers use).
#pragma once

#include <cstdint>
#include <vector>

#include "model/moe_routing.h"

namespace fp8rl {

class LoadBalanceStats {
 public:
  // Forgets every layer: the start of a forward.
  void reset();
  // One MoE layer's routing, over the rows where is_real[n] (all when null).
  void add_layer(const MoeRouting& routing, const uint8_t* is_real);
  // (token, layer) pairs counted so far: L N.
  int64_t decisions() const { return decisions_; }
  // aux as above; 0 before any real token was counted.
  double loss() const;
  // [E]: d aux / d p_e at each counted (token, layer), times `weight`.
  std::vector<float> dprobs(double weight) const;

 private:
  int64_t experts_ = 0, decisions_ = 0;
  std::vector<int64_t> count_;    // [E] choices of each expert
  std::vector<double> prob_sum_;  // [E] sum of p_e, in (layer, token) order
};

}  // namespace fp8rl
