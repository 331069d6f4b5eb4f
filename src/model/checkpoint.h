// Model checkpoints: a directory in the Hugging Face layout, published atomically.
//
//   DIR/config.json            HF config (LlamaForCausalLM, or Qwen3ForCausalLM with q/k-norm)
//   DIR/model.safetensors      FP32 master weights under their HF names
//   DIR/optimizer.safetensors  (optional) AdamW moments "exp_avg.NAME" / "exp_avg_sq.NAME",
//                              metadata "step"
//   DIR/trainer_state.json     (optional) whatever the training loop needs to resume
//
// Every load error names the file and the tensor or key, and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

#include "model/config.h"
#include "model/optimizer.h"
#include "model/transformer.h"

namespace fp8rl {

// Writes the checkpoint into DIR atomically (a previous checkpoint at DIR is replaced whole).
// `optimizer` and `trainer_state` are optional (nullptr / null json).
void save_checkpoint(const std::filesystem::path& dir, const Transformer& model, const AdamW* optimizer,
                     const nlohmann::json& trainer_state);

// The architecture stored in DIR/config.json.
ModelConfig load_model_config(const std::filesystem::path& dir);
// Reads DIR/model.safetensors into the model's masters (every tensor must be there with its
// shape, F32 or BF16) and refreshes the low-precision copies.
void load_model_weights(const std::filesystem::path& dir, Transformer& model);
// Reads DIR/optimizer.safetensors; throws if the checkpoint has none.
void load_optimizer_state(const std::filesystem::path& dir, AdamW& optimizer);
// DIR/trainer_state.json, or a null json if there is none.
nlohmann::json load_trainer_state(const std::filesystem::path& dir);

// HF config.json contents for `config` (and the inverse, which validates every field).
nlohmann::json hf_config_json(const ModelConfig& config);
ModelConfig model_config_from_hf_json(const nlohmann::json& j, const std::string& source);

}  // namespace fp8rl
