// Model checkpoints: a directory in the Hugging Face layout, published atomically.
//
//   DIR/config.json            HF config (LlamaForCausalLM, or Qwen3ForCausalLM with q/k-norm)
//   DIR/model.safetensors      FP32 master weights under their HF names (any HF model directory
//                              loads as a starting point: see hf_weights.h)
//   DIR/optimizer.safetensors  (optional) AdamW moments "exp_avg.NAME" / "exp_avg_sq.NAME",
//                              metadata "step"
//   DIR/trainer_state.json     (optional) whatever the training loop needs to resume
//
// Every load error names the file and the tensor or key, and what was expected.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>

#include "arch/config.h"
#include "model/hf_config.h"   // load_model_config
#include "model/hf_weights.h"  // load_model_weights
#include "model/optimizer.h"
#include "model/transformer.h"

namespace fp8rl {

// Writes the checkpoint into DIR atomically (a previous checkpoint at DIR is replaced whole).
// Refuses (throws, writing nothing) weights that hold a NaN or an infinity.
// `optimizer` and `trainer_state` are optional (nullptr / null json). `model_source`, when given,
// is the HF model directory the run started from: its tokenizer files are copied and its other
// config.json keys kept, so the checkpoint is a complete model directory.
void save_checkpoint(const std::filesystem::path& dir, const Transformer& model, const AdamW* optimizer,
                     const nlohmann::json& trainer_state, const std::filesystem::path& model_source = {});

// Reads DIR/optimizer.safetensors; throws if the checkpoint has none.
void load_optimizer_state(const std::filesystem::path& dir, AdamW& optimizer);
// DIR/trainer_state.json (checked to be an object), or a null json if there is none.
nlohmann::json load_trainer_state(const std::filesystem::path& dir);
// The step count under `key` of a trainer state read from DIR, checked: an integer in
// [0, max_steps]. Errors name the file and the key.
int64_t trainer_state_step(const nlohmann::json& state, const std::filesystem::path& dir, const char* key,
                           int64_t max_steps);

}  // namespace fp8rl
