// The model spec: every tensor of a model, declared once. For each: its role, its layer and
// expert, its Hugging Face name, its shape from the config, whether AdamW decays it and which
// precision rule governs it. This is the one place that spells a Hugging Face tensor name or a
// projection's shape; the parameter layout, the loader, both exporters, the trainer's and the
// generator's linears, the refit and the checkpoints all iterate it or look tensors up by role.
//
// Families (arch/config.h): Llama 3 (no q/k norms), Qwen2 (biases on q, k and v), Qwen3 (q/k
// norms) and Qwen3-MoE (a router and E experts in place of an MoE layer's dense MLP).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "arch/config.h"
#include "arch/precision.h"

namespace fp8rl {

enum class TensorRole : uint8_t {
  kEmbedding,   // [V, C]  model.embed_tokens.weight
  kAttnNorm,    // [C]     input_layernorm
  kQ,           // [Hq*D, C]
  kK,           // [Hkv*D, C]
  kV,           // [Hkv*D, C]
  kQBias,       // [Hq*D]  (qkv_bias only)
  kKBias,       // [Hkv*D] (qkv_bias only)
  kVBias,       // [Hkv*D] (qkv_bias only)
  kO,           // [C, Hq*D]
  kQNorm,       // [D]     (qk_norm only)
  kKNorm,       // [D]     (qk_norm only)
  kMlpNorm,     // [C]     post_attention_layernorm
  kGate,        // [F, C]  a dense MLP's
  kUp,          // [F, C]
  kDown,        // [C, F]
  kRouter,      // [E, C]  an MoE layer's
  kExpertGate,  // [FE, C] expert e's
  kExpertUp,    // [FE, C]
  kExpertDown,  // [C, FE]
  kFinalNorm,   // [C]
  kLmHead,      // [V, C]  (absent when the embeddings are tied: the head is the embedding)
};

// How a tensor's precision is decided.
enum class PrecisionRule : uint8_t {
  kVector,     // a norm's weight or a bias: FP32 values, never quantized
  kLinear,     // the policy's per-layer rule (PrecisionPolicy::linear_precision)
  kRouter,     // FP32: its logits decide the experts (model/moe.h)
  kEmbedding,  // a row gather of the FP32 master (BF16-rounded with BF16 activations)
  kLmHead,     // lm_head_precision
};

struct TensorSpec {
  TensorRole role = TensorRole::kEmbedding;
  int64_t layer = -1;   // the transformer layer, -1 outside the layers
  int64_t expert = -1;  // an MoE expert's index, else -1
  std::string name;     // Hugging Face name, e.g. "model.layers.0.mlp.up_proj.weight"
  Shape shape;
  bool decay = false;   // AdamW weight decay applies (matrices, not norms or biases)
  PrecisionRule rule = PrecisionRule::kVector;
};

// Every tensor of `config`'s model in the canonical order (the flat parameter buffer's, the
// checkpoint's and the exporters'): the embedding; per layer its attention, norms and MLP (an MoE
// layer's router, then each expert's gate, up, down); the final norm; the untied LM head.
std::vector<TensorSpec> model_tensors(const ModelConfig& config);

// Layer `layer`'s projections in the order the engines keep them: q, k, v, o, then gate, up,
// down, or an MoE layer's router and each expert's gate, up, down.
std::vector<TensorSpec> layer_linears(const ModelConfig& config, int64_t layer);

// An MoE block's projections in layer `layer`: the router [E, C], then each expert's gate and up
// [FE, C] and down [C, FE] (the part of layer_linears after o in an MoE layer).
std::vector<TensorSpec> moe_linears(int64_t layer, int64_t d_model, int64_t d_expert, int64_t num_experts);

// The LM head's linear: the untied head, or the embedding matrix applied as the head.
TensorSpec lm_head_linear(const ModelConfig& config);

// The spec of one tensor; throws fp8rl::Error if the model has none such.
TensorSpec tensor_spec(const ModelConfig& config, TensorRole role, int64_t layer = -1, int64_t expert = -1);

// The Hugging Face name of a role in a layer (and expert): the only spelling of those names.
std::string tensor_name(TensorRole role, int64_t layer = -1, int64_t expert = -1);

// A stored tensor that belongs to no parameter and is skipped on load (RoPE's inv_freq buffers;
// the head of a checkpoint saved with tied embeddings).
bool ignored_stored_tensor(std::string_view name, const ModelConfig& config);

// The precision of a projection (a spec whose rule is kLinear, kRouter or kLmHead) in a model of
// `n_layers` layers.
Precision linear_precision(const PrecisionPolicy& policy, int64_t n_layers, const TensorSpec& spec);
// The LM head's precision, the same in both engines: FP32 with fp32_lm_head or FP32 activations,
// else BF16 (never FP8).
Precision lm_head_precision(const PrecisionPolicy& policy);

// The bias of a projection role (kQBias for kQ, ...), or the role itself when it has none.
TensorRole bias_role(TensorRole projection);

// Whether the role is a projection's bias.
bool is_bias(TensorRole role);

// Whether the role is an output projection of a residual branch (o, down, an expert's down),
// whose random initialisation is scaled by 1/sqrt(2 L).
bool is_residual_output(TensorRole role);
// Whether the role is a matrix applied by a linear layer inside a transformer layer.
bool is_layer_linear(TensorRole role);

// The role's name for messages and the Hugging Face module suffix of a layer linear
// ("self_attn.q_proj", "mlp.experts.3.up_proj", ...): the name without ".weight".
const char* tensor_role_name(TensorRole role);
std::string module_name(std::string_view tensor_name);

}  // namespace fp8rl
