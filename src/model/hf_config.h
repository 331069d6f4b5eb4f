// A Hugging Face `config.json` <-> ModelConfig, for the two architectures fp8rl implements:
//
//   LlamaForCausalLM  (model_type "llama"): Llama 2/3.x dense, rope_scaling null or
//                     {"rope_type": "llama3", factor, low_freq_factor, high_freq_factor,
//                      original_max_position_embeddings}
//   Qwen3ForCausalLM  (model_type "qwen3"): Qwen3 dense, i.e. Llama plus an RMSNorm over each
//                     head of q and k before RoPE
//
// Keys read: architectures, model_type, vocab_size, hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads, num_key_value_heads (default: num_attention_heads),
// head_dim (default hidden_size / num_attention_heads), max_position_embeddings, rms_norm_eps,
// rope_theta (default 10000), rope_scaling, tie_word_embeddings (default false). Keys that would
// change the computation in a way fp8rl does not implement are refused with an error naming the
// key: hidden_act other than "silu", attention_bias or mlp_bias true, use_sliding_window true,
// any other rope_scaling type. Other keys (token ids, torch_dtype, ...) are ignored on load and
// kept on export (see hf_weights.h).
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "arch/config.h"

namespace fp8rl {

// config.json contents for `config`, with fp8rl's own "fp8rl_preset" key. `base` (optional, may
// be null) is the config.json the model came from: its other keys (bos_token_id, ...) are kept.
nlohmann::json hf_config_json(const ModelConfig& config, const nlohmann::json& base = nullptr);
// The inverse; validates every field. `source` names the file in errors.
ModelConfig model_config_from_hf_json(const nlohmann::json& j, const std::string& source);

// DIR/config.json parsed; errors name the directory or the file.
nlohmann::json read_hf_config_json(const std::filesystem::path& dir);
// The architecture in DIR/config.json.
ModelConfig load_model_config(const std::filesystem::path& dir);

// The config.json of a directory written from `config` (a checkpoint, an export) whose weights
// came from `source_dir` (empty for a random model): the source's config.json keys are kept
// (hf_config_json), and where the source has no tokenizer.json the key "fp8rl_tokenizer":
// "char" records that the model speaks fp8rl's character vocabulary, so that the directory loads
// with it again (load_model_tokenizer) instead of being refused for a missing tokenizer.json.
nlohmann::json derived_hf_config_json(const ModelConfig& config, const std::filesystem::path& source_dir);
// Whether DIR/config.json carries "fp8rl_tokenizer": "char" (see above).
bool uses_char_tokenizer(const nlohmann::json& config);

// Copies the tokenizer files of a HF model directory that are present in `from` (tokenizer.json,
// tokenizer_config.json, special_tokens_map.json, generation_config.json) into `to`.
void copy_tokenizer_files(const std::filesystem::path& from, const std::filesystem::path& to);

// A JSON file parsed, with errors naming the file.
nlohmann::json read_json_file(const std::filesystem::path& path);

}  // namespace fp8rl
