#include "model/params.h"

#include <fmt/format.h>

#include <cstring>
#include <map>

#include "core/check.h"

namespace fp8rl {

std::string layer_param_name(int64_t layer, std::string_view suffix) {
  return fmt::format("model.layers.{}.{}", layer, suffix);
}

std::string expert_param_name(int64_t layer, int64_t expert, std::string_view proj) {
  return fmt::format("model.layers.{}.mlp.experts.{}.{}.weight", layer, expert, proj);
}

ParamLayout::ParamLayout(const ModelConfig& c) : config_(c) {
  c.validate();
  auto add = [&](std::string name, Shape shape, bool decay) {
    tensors_.push_back({std::move(name), shape, numel_, decay});
    numel_ += shape.numel();
  };
  add("model.embed_tokens.weight", Shape{c.vocab_size, c.d_model}, /*decay=*/true);
  for (int64_t l = 0; l < c.n_layers; ++l) {
    add(layer_param_name(l, "input_layernorm.weight"), Shape{c.d_model}, /*decay=*/false);
    add(layer_param_name(l, "self_attn.q_proj.weight"), Shape{c.q_dim(), c.d_model}, /*decay=*/true);
    add(layer_param_name(l, "self_attn.k_proj.weight"), Shape{c.kv_dim(), c.d_model}, /*decay=*/true);
    add(layer_param_name(l, "self_attn.v_proj.weight"), Shape{c.kv_dim(), c.d_model}, /*decay=*/true);
    add(layer_param_name(l, "self_attn.o_proj.weight"), Shape{c.d_model, c.q_dim()}, /*decay=*/true);
    if (c.qk_norm) {
      add(layer_param_name(l, "self_attn.q_norm.weight"), Shape{c.head_dim}, /*decay=*/false);
      add(layer_param_name(l, "self_attn.k_norm.weight"), Shape{c.head_dim}, /*decay=*/false);
    }
    add(layer_param_name(l, "post_attention_layernorm.weight"), Shape{c.d_model}, /*decay=*/false);
    if (c.is_moe_layer(l)) {
      add(layer_param_name(l, "mlp.gate.weight"), Shape{c.num_experts, c.d_model}, /*decay=*/true);
      for (int64_t e = 0; e < c.num_experts; ++e) {
        add(expert_param_name(l, e, "gate_proj"), Shape{c.d_expert, c.d_model}, /*decay=*/true);
        add(expert_param_name(l, e, "up_proj"), Shape{c.d_expert, c.d_model}, /*decay=*/true);
        add(expert_param_name(l, e, "down_proj"), Shape{c.d_model, c.d_expert}, /*decay=*/true);
      }
      continue;
    }
    add(layer_param_name(l, "mlp.gate_proj.weight"), Shape{c.d_ff, c.d_model}, /*decay=*/true);
    add(layer_param_name(l, "mlp.up_proj.weight"), Shape{c.d_ff, c.d_model}, /*decay=*/true);
    add(layer_param_name(l, "mlp.down_proj.weight"), Shape{c.d_model, c.d_ff}, /*decay=*/true);
  }
  add("model.norm.weight", Shape{c.d_model}, /*decay=*/false);
  if (!c.tie_embeddings) add("lm_head.weight", Shape{c.vocab_size, c.d_model}, /*decay=*/true);
}

const ParamInfo& ParamLayout::find(std::string_view name) const {
  for (const ParamInfo& p : tensors_)
    if (p.name == name) return p;
  FP8RL_CHECK(false, "the model has no parameter '{}'", name);
  return tensors_.front();
}

WeightPointers ParamLayout::bind(float* base) const {
  return bind_with([&](std::string_view name) { return base + find(name).offset; });
}

int64_t ParamLayout::norms_numel() const {
  int64_t n = 0;
  for (const ParamInfo& p : tensors_)
    if (p.shape.rank == 1) n += p.shape.numel();
  return n;
}

WeightPointers ParamLayout::bind_norms(float* base) const {
  std::map<std::string_view, float*> at;
  int64_t offset = 0;
  for (const ParamInfo& p : tensors_)
    if (p.shape.rank == 1) {
      at[p.name] = base + offset;
      offset += p.shape.numel();
    }
  return bind_with([&](std::string_view name) {
    const auto it = at.find(name);
    return it == at.end() ? nullptr : it->second;
  });
}

WeightPointers ParamLayout::bind_with(const std::function<float*(std::string_view)>& at) const {
  WeightPointers w;
  w.embed = at("model.embed_tokens.weight");
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    auto lp = [&](std::string_view suffix) { return at(layer_param_name(l, suffix)); };
    LayerWeights lw{};
    lw.attn_norm = lp("input_layernorm.weight");
    lw.wq = lp("self_attn.q_proj.weight");
    lw.wk = lp("self_attn.k_proj.weight");
    lw.wv = lp("self_attn.v_proj.weight");
    lw.wo = lp("self_attn.o_proj.weight");
    lw.q_norm = config_.qk_norm ? lp("self_attn.q_norm.weight") : nullptr;
    lw.k_norm = config_.qk_norm ? lp("self_attn.k_norm.weight") : nullptr;
    lw.mlp_norm = lp("post_attention_layernorm.weight");
    if (config_.is_moe_layer(l)) {
      lw.w_gate = lw.w_up = lw.w_down = nullptr;
      lw.moe.router = lp("mlp.gate.weight");
      for (int64_t e = 0; e < config_.num_experts; ++e) {
        lw.moe.gate.push_back(at(expert_param_name(l, e, "gate_proj")));
        lw.moe.up.push_back(at(expert_param_name(l, e, "up_proj")));
        lw.moe.down.push_back(at(expert_param_name(l, e, "down_proj")));
      }
    } else {
      lw.w_gate = lp("mlp.gate_proj.weight");
      lw.w_up = lp("mlp.up_proj.weight");
      lw.w_down = lp("mlp.down_proj.weight");
    }
    w.layers.push_back(lw);
  }
  w.final_norm = at("model.norm.weight");
  w.lm_head = config_.tie_embeddings ? w.embed : at("lm_head.weight");
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
