#include "arch/spec.h"

#include <fmt/format.h>

#include "core/check.h"

namespace fp8rl {

namespace {

// A layer tensor's name inside "model.layers.{l}." (an expert's with its index in it).
std::string layer_suffix(TensorRole role, int64_t expert) {
  switch (role) {
    case TensorRole::kAttnNorm: return "input_layernorm.weight";
    case TensorRole::kQ: return "self_attn.q_proj.weight";
    case TensorRole::kK: return "self_attn.k_proj.weight";
    case TensorRole::kV: return "self_attn.v_proj.weight";
    case TensorRole::kQBias: return "self_attn.q_proj.bias";
    case TensorRole::kKBias: return "self_attn.k_proj.bias";
    case TensorRole::kVBias: return "self_attn.v_proj.bias";
    case TensorRole::kO: return "self_attn.o_proj.weight";
    case TensorRole::kQNorm: return "self_attn.q_norm.weight";
    case TensorRole::kKNorm: return "self_attn.k_norm.weight";
    case TensorRole::kMlpNorm: return "post_attention_layernorm.weight";
    case TensorRole::kGate: return "mlp.gate_proj.weight";
    case TensorRole::kUp: return "mlp.up_proj.weight";
    case TensorRole::kDown: return "mlp.down_proj.weight";
    case TensorRole::kRouter: return "mlp.gate.weight";
    case TensorRole::kExpertGate: return fmt::format("mlp.experts.{}.gate_proj.weight", expert);
    case TensorRole::kExpertUp: return fmt::format("mlp.experts.{}.up_proj.weight", expert);
    case TensorRole::kExpertDown: return fmt::format("mlp.experts.{}.down_proj.weight", expert);
    default: break;
  }
  FP8RL_CHECK(false, "tensor role '{}' is not a layer tensor", tensor_role_name(role));
  return {};
}

bool is_expert(TensorRole role) {
  return role == TensorRole::kExpertGate || role == TensorRole::kExpertUp || role == TensorRole::kExpertDown;
}

// Appends layer `l`'s tensor of `role` (a norm unless `shape` is a matrix) to `out`.
void add_layer_tensor(std::vector<TensorSpec>& out, int64_t l, TensorRole role, Shape shape, int64_t expert = -1) {
  const bool matrix = shape.rank == 2;
  const PrecisionRule rule = !matrix                         ? PrecisionRule::kVector
                             : role == TensorRole::kRouter ? PrecisionRule::kRouter
                                                           : PrecisionRule::kLinear;
  out.push_back({role, l, expert, tensor_name(role, l, expert), shape, /*decay=*/matrix, rule});
}

void append_moe(int64_t l, int64_t C, int64_t FE, int64_t E, std::vector<TensorSpec>& out) {
  add_layer_tensor(out, l, TensorRole::kRouter, Shape{E, C});
  for (int64_t e = 0; e < E; ++e) {
    add_layer_tensor(out, l, TensorRole::kExpertGate, Shape{FE, C}, e);
    add_layer_tensor(out, l, TensorRole::kExpertUp, Shape{FE, C}, e);
    add_layer_tensor(out, l, TensorRole::kExpertDown, Shape{C, FE}, e);
  }
}

// Layer `l`'s tensors, appended to `out` in the canonical order.
void append_layer(const ModelConfig& c, int64_t l, bool linears_only, std::vector<TensorSpec>& out) {
  const int64_t C = c.d_model;
  auto add = [&](TensorRole role, Shape shape) {
    if (!linears_only || shape.rank == 2) add_layer_tensor(out, l, role, shape);
  };
  add(TensorRole::kAttnNorm, Shape{C});
  add(TensorRole::kQ, Shape{c.q_dim(), C});
  add(TensorRole::kK, Shape{c.kv_dim(), C});
  add(TensorRole::kV, Shape{c.kv_dim(), C});
  if (c.qkv_bias) {
    add(TensorRole::kQBias, Shape{c.q_dim()});
    add(TensorRole::kKBias, Shape{c.kv_dim()});
    add(TensorRole::kVBias, Shape{c.kv_dim()});
  }
  add(TensorRole::kO, Shape{C, c.q_dim()});
  if (c.qk_norm) {
    add(TensorRole::kQNorm, Shape{c.head_dim});
    add(TensorRole::kKNorm, Shape{c.head_dim});
  }
  add(TensorRole::kMlpNorm, Shape{C});
  if (c.is_moe_layer(l)) return append_moe(l, C, c.d_expert, c.num_experts, out);
  add(TensorRole::kGate, Shape{c.d_ff, C});
  add(TensorRole::kUp, Shape{c.d_ff, C});
  add(TensorRole::kDown, Shape{C, c.d_ff});
}

TensorSpec embedding(const ModelConfig& c) {
  return {TensorRole::kEmbedding, -1, -1, tensor_name(TensorRole::kEmbedding), Shape{c.vocab_size, c.d_model},
          /*decay=*/true, PrecisionRule::kEmbedding};
}

}  // namespace

std::string tensor_name(TensorRole role, int64_t layer, int64_t expert) {
  switch (role) {
    case TensorRole::kEmbedding: return "model.embed_tokens.weight";
    case TensorRole::kFinalNorm: return "model.norm.weight";
    case TensorRole::kLmHead: return "lm_head.weight";
    default: break;
  }
  FP8RL_CHECK(layer >= 0, "tensor role '{}' needs a layer", tensor_role_name(role));
  FP8RL_CHECK(is_expert(role) == (expert >= 0), "tensor role '{}': expert {}", tensor_role_name(role), expert);
  return fmt::format("model.layers.{}.{}", layer, layer_suffix(role, expert));
}

std::vector<TensorSpec> model_tensors(const ModelConfig& c) {
  c.validate();
  std::vector<TensorSpec> out{embedding(c)};
  for (int64_t l = 0; l < c.n_layers; ++l) append_layer(c, l, /*linears_only=*/false, out);
  out.push_back({TensorRole::kFinalNorm, -1, -1, tensor_name(TensorRole::kFinalNorm), Shape{c.d_model}, false,
                 PrecisionRule::kVector});
  if (!c.tie_embeddings) out.push_back(lm_head_linear(c));
  return out;
}

std::vector<TensorSpec> layer_linears(const ModelConfig& c, int64_t layer) {
  FP8RL_CHECK(layer >= 0 && layer < c.n_layers, "layer {} outside [0, {})", layer, c.n_layers);
  std::vector<TensorSpec> out;
  append_layer(c, layer, /*linears_only=*/true, out);
  return out;
}

std::vector<TensorSpec> moe_linears(int64_t layer, int64_t d_model, int64_t d_expert, int64_t num_experts) {
  std::vector<TensorSpec> out;
  append_moe(layer, d_model, d_expert, num_experts, out);
  return out;
}

TensorSpec lm_head_linear(const ModelConfig& c) {
  if (c.tie_embeddings) {
    TensorSpec head = embedding(c);
    head.rule = PrecisionRule::kLmHead;
    return head;
  }
  return {TensorRole::kLmHead, -1, -1, tensor_name(TensorRole::kLmHead), Shape{c.vocab_size, c.d_model},
          /*decay=*/true, PrecisionRule::kLmHead};
}

TensorSpec tensor_spec(const ModelConfig& c, TensorRole role, int64_t layer, int64_t expert) {
  for (TensorSpec& t : model_tensors(c))
    if (t.role == role && t.layer == layer && t.expert == expert) return std::move(t);
  FP8RL_CHECK(false, "the model has no tensor '{}' in layer {} (expert {})", tensor_role_name(role), layer, expert);
  return {};
}

bool ignored_stored_tensor(std::string_view name, const ModelConfig& config) {
  return name.ends_with("rotary_emb.inv_freq") || (config.tie_embeddings && name == tensor_name(TensorRole::kLmHead));
}

Precision lm_head_precision(const PrecisionPolicy& policy) {
  return policy.fp32_lm_head || policy.activations == Precision::kF32 ? Precision::kF32 : Precision::kBF16;
}

Precision linear_precision(const PrecisionPolicy& policy, int64_t n_layers, const TensorSpec& spec) {
  switch (spec.rule) {
    case PrecisionRule::kLinear: return policy.linear_precision(spec.layer, n_layers, spec.name);
    case PrecisionRule::kRouter: return Precision::kF32;
    case PrecisionRule::kLmHead: return lm_head_precision(policy);
    default: break;
  }
  FP8RL_CHECK(false, "tensor '{}' is not a projection", spec.name);
  return Precision::kF32;
}

TensorRole bias_role(TensorRole projection) {
  switch (projection) {
    case TensorRole::kQ: return TensorRole::kQBias;
    case TensorRole::kK: return TensorRole::kKBias;
    case TensorRole::kV: return TensorRole::kVBias;
    default: return projection;
  }
}

bool is_bias(TensorRole role) {
  return role == TensorRole::kQBias || role == TensorRole::kKBias || role == TensorRole::kVBias;
}

bool is_residual_output(TensorRole role) {
  return role == TensorRole::kO || role == TensorRole::kDown || role == TensorRole::kExpertDown;
}

bool is_layer_linear(TensorRole role) {
  switch (role) {
    case TensorRole::kQ:
    case TensorRole::kK:
    case TensorRole::kV:
    case TensorRole::kO:
    case TensorRole::kGate:
    case TensorRole::kUp:
    case TensorRole::kDown:
    case TensorRole::kRouter:
    case TensorRole::kExpertGate:
    case TensorRole::kExpertUp:
    case TensorRole::kExpertDown: return true;
    default: return false;
  }
}

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::kEmbedding: return "embedding";
    case TensorRole::kAttnNorm: return "attn_norm";
    case TensorRole::kQ: return "q";
    case TensorRole::kK: return "k";
    case TensorRole::kV: return "v";
    case TensorRole::kQBias: return "q_bias";
    case TensorRole::kKBias: return "k_bias";
    case TensorRole::kVBias: return "v_bias";
    case TensorRole::kO: return "o";
    case TensorRole::kQNorm: return "q_norm";
    case TensorRole::kKNorm: return "k_norm";
    case TensorRole::kMlpNorm: return "mlp_norm";
    case TensorRole::kGate: return "gate";
    case TensorRole::kUp: return "up";
    case TensorRole::kDown: return "down";
    case TensorRole::kRouter: return "router";
    case TensorRole::kExpertGate: return "expert_gate";
    case TensorRole::kExpertUp: return "expert_up";
    case TensorRole::kExpertDown: return "expert_down";
    case TensorRole::kFinalNorm: return "final_norm";
    case TensorRole::kLmHead: return "lm_head";
  }
  return "?";
}

std::string module_name(std::string_view tensor_name) {
  constexpr std::string_view kWeight = ".weight";
  FP8RL_CHECK(tensor_name.ends_with(kWeight), "tensor '{}' is not a module's weight", tensor_name);
  return std::string(tensor_name.substr(0, tensor_name.size() - kWeight.size()));
}

}  // namespace fp8rl
