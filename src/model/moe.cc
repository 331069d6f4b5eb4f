#include "model/moe.h"

#include <cstring>

#include "core/check.h"
#include "kernels/elementwise/swiglu.h"
#include "model/params.h"
#include "arch/spec.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {
void ensure(AlignedBuffer<float>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf = AlignedBuffer<float>(static_cast<size_t>(n));
}
}  // namespace

MoeMlp::MoeMlp(int64_t layer, int64_t n_layers, const MoeShape& shape, const PrecisionPolicy& policy, bool frozen)
    : shape_(shape), bf16_activations_(policy.activations == Precision::kBF16) {
  const int64_t C = shape_.d_model, F = shape_.d_expert, E = shape_.num_experts;
  FP8RL_CHECK(C > 0 && F > 0 && E > 0 && shape_.top_k > 0 && shape_.top_k <= E,
              "MoE layer {}: d_model {}, d_expert {}, top {} of {} experts", layer, C, F, shape_.top_k, E);
  for (const TensorSpec& t : moe_linears(layer, C, F, E)) {
    const Precision p = linear_precision(policy, n_layers, t);
    const bool router = t.role == TensorRole::kRouter;  // its logits stay FP32 (not rounded): they decide the experts
    std::vector<Linear>* list = t.role == TensorRole::kExpertGate ? &gate_
                                : t.role == TensorRole::kExpertUp ? &up_
                                : t.role == TensorRole::kExpertDown ? &down_
                                                                    : nullptr;
    Linear lin = frozen ? Linear::frozen(t.name, t.shape[0], t.shape[1], p, policy.weight_scale_format,
                                         policy.activation_scale_format, !router && bf16_activations_)
                        : Linear(t.name, t.shape[0], t.shape[1], p, policy.weight_scale_format,
                                 policy.activation_scale_format, !router && bf16_activations_);
    if (router) {
      router_ = std::move(lin);
    } else {
      list->push_back(std::move(lin));
    }
  }
  FP8RL_CHECK(static_cast<int64_t>(gate_.size()) == E && up_.size() == gate_.size() && down_.size() == gate_.size(),
              "MoE layer {}: {} experts declared, {} expected", layer, gate_.size(), E);
}

MoeMlp MoeMlp::frozen_copy() const {
  MoeMlp f;
  f.shape_ = shape_;
  f.bf16_activations_ = bf16_activations_;
  f.router_ = router_.frozen_copy();
  for (size_t e = 0; e < gate_.size(); ++e) {
    f.gate_.push_back(gate_[e].frozen_copy());
    f.up_.push_back(up_[e].frozen_copy());
    f.down_.push_back(down_[e].frozen_copy());
  }
  return f;
}

void MoeMlp::refresh_weights(const MoeWeights& w) {
  const size_t E = static_cast<size_t>(shape_.num_experts);
  FP8RL_CHECK(w.router != nullptr && w.gate.size() == E && w.up.size() == E && w.down.size() == E,
              "MoE '{}': weights for {} experts expected", router_.name(), E);
  router_.refresh_weights(w.router);
  for (size_t e = 0; e < E; ++e) {
    gate_[e].refresh_weights(w.gate[e]);
    up_[e].refresh_weights(w.up[e]);
    down_[e].refresh_weights(w.down[e]);
  }
}

void MoeMlp::forward(float* y, const float* h, int64_t N, MoeActs& a, bool save_for_backward,
                     const int32_t* replay) const {
  const int64_t C = shape_.d_model, F = shape_.d_expert, E = shape_.num_experts, k = shape_.top_k, R = N * k;
  ensure(a.logits, N * E);
  router_.forward(a.logits.data(), h, N, a.router, save_for_backward);
  route_tokens(a.logits.data(), N, E, k, shape_.norm_topk_prob, a.routing, replay);
  group_by_expert(a.routing, a.groups);
  ensure(a.x, R * C), ensure(a.g, R * F), ensure(a.u, R * F), ensure(a.s, R * F), ensure(a.out, R * C);
  gather_expert_inputs(a.x.data(), h, a.groups, C);
  a.gate.resize(static_cast<size_t>(E)), a.up.resize(static_cast<size_t>(E)), a.down.resize(static_cast<size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = a.groups.begin[static_cast<size_t>(e)], M = a.groups.begin[static_cast<size_t>(e + 1)] - r0;
    if (M == 0) continue;
    const size_t i = static_cast<size_t>(e);
    float *g = a.g.data() + r0 * F, *u = a.u.data() + r0 * F, *s = a.s.data() + r0 * F;
    gate_[i].forward(g, a.x.data() + r0 * C, M, a.gate[i], save_for_backward);
    up_[i].forward(u, a.x.data() + r0 * C, M, a.up[i], save_for_backward,
                   up_[i].can_share_input(gate_[i]) ? &a.gate[i] : nullptr);
    swiglu_forward(s, g, u, M * F, bf16_activations_);
    down_[i].forward(a.out.data() + r0 * C, s, M, a.down[i], save_for_backward);
  }
  combine_expert_outputs(y, a.out.data(), a.routing, a.groups, C);
  if (bf16_activations_) bf16_round_f32(y, N * C);
}

void MoeMlp::backward(float* dh, bool accumulate_dh, const float* dy, const MoeActs& a, const MoeWeights& grads,
                      MoeGradScratch& scratch, const float* dprobs) const {
  const int64_t N = a.routing.N, C = shape_.d_model, F = shape_.d_expert, E = shape_.num_experts, k = shape_.top_k;
  const int64_t R = N * k;
  // The combine: d out[row(n, j)] = w[n, j] dy[n], d w[n, j] = dy[n] . out[row(n, j)].
  std::vector<float>& dweight = scratch.dweight;
  dweight.resize(static_cast<size_t>(R));
  ensure(scratch.dout, R * C), ensure(scratch.dx, R * C);
  ensure(scratch.ds, R * F), ensure(scratch.dg, R * F), ensure(scratch.du, R * F);
  AlignedBuffer<float>&dout = scratch.dout, &dx = scratch.dx, &ds = scratch.ds, &dg = scratch.dg, &du = scratch.du;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t row = a.groups.row_of[static_cast<size_t>(n * k + j)];
      const float w = a.routing.weight[static_cast<size_t>(n * k + j)];
      const float* o = a.out.data() + row * C;
      float* d = dout.data() + row * C;
      float dot = 0.0f;
      for (int64_t c = 0; c < C; ++c) {
        dot += dy[n * C + c] * o[c];
        d[c] = w * dy[n * C + c];
      }
      dweight[static_cast<size_t>(n * k + j)] = dot;
    }
  }
  for (int64_t e = 0; e < E; ++e) {
    const int64_t r0 = a.groups.begin[static_cast<size_t>(e)], M = a.groups.begin[static_cast<size_t>(e + 1)] - r0;
    if (M == 0) continue;
    const size_t i = static_cast<size_t>(e);
    float *dsr = ds.data() + r0 * F, *dgr = dg.data() + r0 * F, *dur = du.data() + r0 * F, *dxr = dx.data() + r0 * C;
    down_[i].backward(dsr, /*accumulate_dx=*/false, grads.down[i], dout.data() + r0 * C, M, a.down[i]);
    swiglu_backward(dgr, dur, dsr, a.g.data() + r0 * F, a.u.data() + r0 * F, M * F);
    gate_[i].backward(dxr, /*accumulate_dx=*/false, grads.gate[i], dgr, M, a.gate[i]);
    up_[i].backward(dxr, /*accumulate_dx=*/true, grads.up[i], dur, M, a.up[i]);
  }
  // The router: through the combine weights only, then its linear.
  std::vector<float>& dlogits = scratch.dlogits;
  dlogits.resize(static_cast<size_t>(N * E));
  route_backward(dlogits.data(), dweight.data(), a.routing, dprobs);
  router_.backward(dh, accumulate_dh, grads.router, dlogits.data(), N, a.router);
  // Each token's expert terms, in slot order.
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < k; ++j) {
      const float* d = dx.data() + int64_t{a.groups.row_of[static_cast<size_t>(n * k + j)]} * C;
      for (int64_t c = 0; c < C; ++c) dh[n * C + c] += d[c];
    }
}

const Linear& MoeMlp::linear(TensorRole role, int64_t expert) const {
  if (role == TensorRole::kRouter) return router_;
  const std::vector<Linear>* list = role == TensorRole::kExpertGate ? &gate_
                                    : role == TensorRole::kExpertUp ? &up_
                                    : role == TensorRole::kExpertDown ? &down_
                                                                      : nullptr;
  FP8RL_CHECK(list != nullptr && expert >= 0 && expert < static_cast<int64_t>(list->size()),
              "MoE '{}': no linear '{}' of expert {}", router_.name(), tensor_role_name(role), expert);
  return (*list)[static_cast<size_t>(expert)];
}

std::vector<const Linear*> MoeMlp::linears() const {
  std::vector<const Linear*> out{&router_};
  for (size_t e = 0; e < gate_.size(); ++e) out.insert(out.end(), {&gate_[e], &up_[e], &down_[e]});
  return out;
}

std::vector<Linear*> MoeMlp::linears() {
  std::vector<Linear*> out{&router_};
  for (size_t e = 0; e < gate_.size(); ++e) out.insert(out.end(), {&gate_[e], &up_[e], &down_[e]});
  return out;
}

}  // namespace fp8rl
