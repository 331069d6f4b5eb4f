// The model's parameter tensors: names (as in HF Llama / Qwen3 checkpoints), shapes, and their
// places in one flat FP32 buffer. Parameters, gradients and both AdamW moments use the same
// layout, so one `bind` gives named pointers into any of them (llm.c style).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "model/config.h"

namespace fp8rl {

struct ParamInfo {
  std::string name;  // e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;
  int64_t offset = 0;  // in floats, into the flat buffer
  bool decay = false;  // AdamW weight decay applies (matrices, not norms)
};

// Named pointers to an MoE layer's MLP tensors, HF layout (E experts of hidden size F).
struct MoeWeights {
  float* router = nullptr;   // [E, C]        mlp.gate.weight
  std::vector<float*> gate;  // [E] x [F, C]  mlp.experts.{e}.gate_proj.weight
  std::vector<float*> up;    // [E] x [F, C]  mlp.experts.{e}.up_proj.weight
  std::vector<float*> down;  // [E] x [C, F]  mlp.experts.{e}.down_proj.weight
};

// Named pointers to one layer's tensors in a flat buffer. Dimension letters as in config.h.
struct LayerWeights {
  float* attn_norm;  // [C]     input_layernorm
  float* wq;         // [Hq*D, C]
  float* wk;         // [Hkv*D, C]
  float* wv;         // [Hkv*D, C]
  float* wo;         // [C, Hq*D]
  float* q_norm;     // [D]     (qk_norm only, else nullptr)
  float* k_norm;     // [D]     (qk_norm only, else nullptr)
  float* mlp_norm;   // [C]     post_attention_layernorm
  float* w_gate;     // [F, C]  (a dense MLP's; nullptr in an MoE layer)
  float* w_up;       // [F, C]
  float* w_down;     // [C, F]
  MoeWeights moe;    // an MoE layer's (config.is_moe_layer)
};

struct WeightPointers {
  float* embed;       // [V, C]
  std::vector<LayerWeights> layers;
  float* final_norm;  // [C]
  float* lm_head;     // [V, C]; the same pointer as embed when the embeddings are tied
};

class ParamLayout {
 public:
  explicit ParamLayout(const ModelConfig& config);
  int64_t numel() const { return numel_; }
  const std::vector<ParamInfo>& tensors() const { return tensors_; }
  // The tensor named `name`; throws fp8rl::Error if there is none.
  const ParamInfo& find(std::string_view name) const;
  WeightPointers bind(float* base) const;
  // The 1-D tensors (the norms) packed in layout order into `base` [norms_numel()]; the matrix
  // pointers are nullptr (a frozen model keeps its matrices in its linears).
  int64_t norms_numel() const;
  WeightPointers bind_norms(float* base) const;

 private:
  WeightPointers bind_with(const std::function<float*(std::string_view)>& at) const;

  ModelConfig config_;
  std::vector<ParamInfo> tensors_;
  int64_t numel_ = 0;
};

// Whether every value is finite (no NaN, no infinity): the weights a diverged run leaves.
bool all_finite(const float* v, int64_t n);
// The first tensor of `layout` whose values in `base` [layout.numel()] are not all finite, or
// nullptr when every one is.
const ParamInfo* first_non_finite_tensor(const ParamLayout& layout, const float* base);

// HF name of layer `l`'s tensor `suffix`, e.g. layer_param_name(0, "mlp.up_proj.weight").
std::string layer_param_name(int64_t layer, std::string_view suffix);
// HF name of expert `e`'s projection `proj` ("gate_proj", "up_proj", "down_proj") in layer `l`.
std::string expert_param_name(int64_t layer, int64_t expert, std::string_view proj);

}  // namespace fp8rl
