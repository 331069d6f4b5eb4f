#include "arch/precision.h"

#include "core/check.h"

namespace fp8rl {

const char* precision_name(Precision p) {
  switch (p) {
    case Precision::kF32: return "fp32";
    case Precision::kBF16: return "bf16";
    case Precision::kFP8: return "fp8";
  }
  return "?";
}

Precision parse_precision(std::string_view name) {
  if (name == "fp32") return Precision::kF32;
  if (name == "bf16") return Precision::kBF16;
  if (name == "fp8") return Precision::kFP8;
  FP8RL_REQUIRE(false, "unknown precision '{}' (expected fp32, bf16 or fp8)", name);
  return Precision::kBF16;
}

void PrecisionPolicy::validate() const {
  FP8RL_REQUIRE(activations != Precision::kFP8, "precision policy: activations must be fp32 or bf16, got fp8");
  FP8RL_REQUIRE(attention != Precision::kFP8, "precision policy: attention_precision must be fp32 or bf16, got fp8");
  FP8RL_REQUIRE(attention == Precision::kF32 || activations == Precision::kBF16,
              "precision policy: attention_precision bf16 needs BF16 activations (q, k, v as BF16 values)");
  FP8RL_REQUIRE(activations == Precision::kBF16 || linear == Precision::kF32,
              "precision policy: {} linears need bf16 activations (fp32 activations are the all-fp32 reference mode)",
              precision_name(linear));
  FP8RL_REQUIRE(num_first_layers_in_bf16 >= 0 && num_last_layers_in_bf16 >= 0,
              "precision policy: num_first/last_layers_in_bf16 must be >= 0, got {} and {}", num_first_layers_in_bf16,
              num_last_layers_in_bf16);
}

Precision PrecisionPolicy::linear_precision(int64_t layer, int64_t n_layers, std::string_view name) const {
  if (linear != Precision::kFP8) return linear;
  if (layer < num_first_layers_in_bf16 || layer >= n_layers - num_last_layers_in_bf16) return Precision::kBF16;
  for (const std::string& s : bf16_linear_substrings)
    if (!s.empty() && name.find(s) != std::string_view::npos) return Precision::kBF16;
  return Precision::kFP8;
}

PrecisionPolicy PrecisionPolicy::fp32() {
  PrecisionPolicy p;
  p.activations = Precision::kF32;
  p.linear = Precision::kF32;
  p.fp32_lm_head = true;
  return p;
}

}  // namespace fp8rl
