#include "model/params.h"

#include <cstring>
#include <map>

#include "core/check.h"

namespace fp8rl {

ParamLayout::ParamLayout(const ModelConfig& c) : config_(c) {
  for (TensorSpec& t : model_tensors(c)) {
    ParamInfo p;
    static_cast<TensorSpec&>(p) = std::move(t);
    p.offset = numel_;
    numel_ += p.shape.numel();
    tensors_.push_back(std::move(p));
  }
}

const ParamInfo& ParamLayout::find(std::string_view name) const {
  for (const ParamInfo& p : tensors_)
    if (p.name == name) return p;
  FP8RL_CHECK(false, "the model has no parameter '{}'", name);
  return tensors_.front();
}

const ParamInfo& ParamLayout::find(TensorRole role, int64_t layer, int64_t expert) const {
  for (const ParamInfo& p : tensors_)
    if (p.role == role && p.layer == layer && p.expert == expert) return p;
  FP8RL_CHECK(false, "the model has no tensor '{}' in layer {} (expert {})", tensor_role_name(role), layer, expert);
  return tensors_.front();
}

WeightPointers ParamLayout::bind(float* base) const {
  return bind_with([&](const ParamInfo& p) { return base + p.offset; });
}

int64_t ParamLayout::norms_numel() const {
  int64_t n = 0;
  for (const ParamInfo& p : tensors_)
    if (p.shape.rank == 1) n += p.shape.numel();
  return n;
}

WeightPointers ParamLayout::bind_norms(float* base) const {
  std::map<const ParamInfo*, float*> at;
  int64_t offset = 0;
  for (const ParamInfo& p : tensors_)
    if (p.shape.rank == 1) {
      at[&p] = base + offset;
      offset += p.shape.numel();
    }
  return bind_with([&](const ParamInfo& p) {
    const auto it = at.find(&p);
    return it == at.end() ? nullptr : it->second;
  });
}

WeightPointers ParamLayout::bind_with(const std::function<float*(const ParamInfo&)>& at) const {
  WeightPointers w{};
  w.layers.assign(static_cast<size_t>(config_.n_layers), LayerWeights{});
  for (int64_t l = 0; l < config_.n_layers; ++l)
    if (config_.is_moe_layer(l)) {
      MoeWeights& m = w.layers[static_cast<size_t>(l)].moe;
      m.gate.assign(static_cast<size_t>(config_.num_experts), nullptr);
      m.up = m.down = m.gate;
    }
  for (const ParamInfo& p : tensors_) {
    float* ptr = at(p);
    if (p.layer < 0) {
      (p.role == TensorRole::kEmbedding ? w.embed : p.role == TensorRole::kFinalNorm ? w.final_norm : w.lm_head) = ptr;
      continue;
    }
    LayerWeights& lw = w.layers[static_cast<size_t>(p.layer)];
    const size_t e = static_cast<size_t>(p.expert);
    switch (p.role) {
      case TensorRole::kAttnNorm: lw.attn_norm = ptr; break;
      case TensorRole::kQ: lw.wq = ptr; break;
      case TensorRole::kK: lw.wk = ptr; break;
      case TensorRole::kV: lw.wv = ptr; break;
      case TensorRole::kQBias: lw.bq = ptr; break;
      case TensorRole::kKBias: lw.bk = ptr; break;
      case TensorRole::kVBias: lw.bv = ptr; break;
      case TensorRole::kO: lw.wo = ptr; break;
      case TensorRole::kQNorm: lw.q_norm = ptr; break;
      case TensorRole::kKNorm: lw.k_norm = ptr; break;
      case TensorRole::kMlpNorm: lw.mlp_norm = ptr; break;
      case TensorRole::kGate: lw.w_gate = ptr; break;
      case TensorRole::kUp: lw.w_up = ptr; break;
      case TensorRole::kDown: lw.w_down = ptr; break;
      case TensorRole::kRouter: lw.moe.router = ptr; break;
      case TensorRole::kExpertGate: lw.moe.gate[e] = ptr; break;
      case TensorRole::kExpertUp: lw.moe.up[e] = ptr; break;
      case TensorRole::kExpertDown: lw.moe.down[e] = ptr; break;
      default: FP8RL_CHECK(false, "tensor '{}': role '{}' in a layer", p.name, tensor_role_name(p.role));
    }
  }
  if (config_.tie_embeddings) w.lm_head = w.embed;
  return w;
}

bool all_finite(const float* v, int64_t n) {
  // On the bits (exponent all ones: an infinity or a NaN), which vectorizes where isfinite may not.
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t bits;
    std::memcpy(&bits, v + i, sizeof bits);
    bad |= static_cast<uint32_t>((bits & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}

const ParamInfo* first_non_finite_tensor(const ParamLayout& layout, const float* base) {
  for (const ParamInfo& p : layout.tensors())
    if (!all_finite(base + p.offset, p.shape.numel())) return &p;
  return nullptr;
}

}  // namespace fp8rl
