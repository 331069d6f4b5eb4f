// The model's parameter tensors (arch/spec.h, in its order) and their places in one flat FP32
// buffer. Parameters, gradients and both AdamW moments use the same layout, so one `bind` gives
// named pointers into any of them (llm.c style).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"
#include "arch/config.h"
#include "arch/spec.h"

namespace fp8rl {

// A tensor of the spec and its place in the flat buffer.
struct ParamInfo : TensorSpec {
  int64_t offset = 0;  // in floats
};

// Named pointers to an MoE layer's MLP tensors (E experts of hidden size F).
struct MoeWeights {
  float* router = nullptr;   // [E, C]
  std::vector<float*> gate;  // [E] x [F, C]
  std::vector<float*> up;    // [E] x [F, C]
  std::vector<float*> down;  // [E] x [C, F]
};

// Named pointers to one layer's tensors in a flat buffer. Dimension letters as in config.h.
struct LayerWeights {
  float* attn_norm;  // [C]
  float* wq;         // [Hq*D, C]
  float* wk;         // [Hkv*D, C]
  float* wv;         // [Hkv*D, C]
  float* bq;         // [Hq*D]  (qkv_bias only, else nullptr)
  float* bk;         // [Hkv*D]
  float* bv;         // [Hkv*D]
  float* wo;         // [C, Hq*D]
  float* q_norm;     // [D]     (qk_norm only, else nullptr)
  float* k_norm;     // [D]     (qk_norm only, else nullptr)
  float* mlp_norm;   // [C]
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
  // The tensor named `name`, or of `role` in `layer` (and `expert`); throws fp8rl::Error if
  // there is none.
  const ParamInfo& find(std::string_view name) const;
  const ParamInfo& find(TensorRole role, int64_t layer = -1, int64_t expert = -1) const;
  WeightPointers bind(float* base) const;
  // The 1-D tensors (norm weights and biases) packed in layout order into `base` [norms_numel()]; the matrix
  // pointers are nullptr (a frozen model keeps its matrices in its linears).
  int64_t norms_numel() const;
  WeightPointers bind_norms(float* base) const;

 private:
  WeightPointers bind_with(const std::function<float*(const ParamInfo&)>& at) const;

  ModelConfig config_;
  std::vector<ParamInfo> tensors_;
  int64_t numel_ = 0;
};

// Whether every value is finite (no NaN, no infinity): the weights a diverged run leaves.
bool all_finite(const float* v, int64_t n);
// The first tensor of `layout` whose values in `base` [layout.numel()] are not all finite, or
// nullptr when every one is.
const ParamInfo* first_non_finite_tensor(const ParamLayout& layout, const float* base);

}  // namespace fp8rl
