// The per-layer precision policy shared by the trainer and the generator (docs/recipe.md s.5).
//
// Linear layers (q, k, v, o, gate, up, down) run in FP32, BF16 or blockwise FP8. Everything else
// (embedding, norms, RoPE, SwiGLU, attention, residual adds) takes BF16 inputs and computes in
// FP32 when `activations` is BF16, or stays FP32 throughout when it is FP32 (the reference mode
// used by gradient checks and the FP32 PyTorch comparison).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "numerics/scale.h"

namespace fp8rl {

enum class Precision : uint8_t { kF32, kBF16, kFP8 };

const char* precision_name(Precision p);
Precision parse_precision(std::string_view name);  // "fp32" | "bf16" | "fp8"

struct PrecisionPolicy {
  Precision activations = Precision::kBF16;  // kF32 or kBF16
  Precision linear = Precision::kBF16;       // default of every transformer linear
  int64_t num_first_layers_in_bf16 = 0;      // whole layers kept in BF16 at the start ...
  int64_t num_last_layers_in_bf16 = 0;       // ... and at the end
  std::vector<std::string> bf16_linear_substrings;  // linears whose HF name contains one stay BF16
  ScaleFormat weight_scale_format = ScaleFormat::kFp32;      // pow2_weight_scaling_factors
  ScaleFormat activation_scale_format = ScaleFormat::kFp32;  // pow2_activation_scaling_factors
  bool fp32_lm_head = false;  // LM head (and the final norm's output) in FP32
  // policy.attention_precision: kF32, or kBF16 = BF16 operands with FP32 accumulation in Q K^T,
  // P V and their backward products (kernels/attention/attention.h), in both engines.
  Precision attention = Precision::kF32;

  // Throws for an inconsistent policy (e.g. FP8 linears with FP32 activations).
  void validate() const;
  // Precision of the linear with HF name `name` in transformer layer `layer` of `n_layers`.
  Precision linear_precision(int64_t layer, int64_t n_layers, std::string_view name) const;
  // The policy of a whole-FP32 reference run.
  static PrecisionPolicy fp32();
};

}  // namespace fp8rl
