// The weights of a Hugging Face model directory, in and out.
//
// Reading: DIR/model.safetensors, or DIR/model.safetensors.index.json ({"weight_map": {tensor:
// shard file}}) and the shards it names. Tensors carry their HF names (params.h) and may be F32,
// BF16 or F16; an FP8 linear may instead be an F8_E4M3 `NAME.weight` with its
// `NAME.weight_scale_inv` (F32, one dequantization scale per 128x128 block, the layout of
// fp8rl's FP8 export and of DeepSeek-V3 / Qwen3-FP8 checkpoints). `lm_head.weight` beside tied
// embeddings and `*.rotary_emb.inv_freq` buffers are ignored; any other tensor the architecture
// has no place for (e.g. attention biases) is an error. Every file, name, dtype and shape is
// checked before the first byte of data is read, so a bad directory loads nothing.
//
// HF checkpoints store the q and k projections' rows in the order of the "rotate half" RoPE layout
// (transformers' Llama conversion permutes Meta's interleaved pairs once, at conversion), which
// is the layout fp8rl's RoPE uses (kernels/elementwise/rope.h): the rows load as they are, no permutation.
//
// Loading that takes more than two seconds reports its progress on stderr (bytes read, rate).
//
// Writing (export_hf_model), published atomically:
//   config.json           the architecture (hf_config.h) over the source model's config.json;
//                         torch_dtype "bfloat16"; for the FP8 format a quantization_config
//                         {quant_method: fp8, fmt: e4m3, activation_scheme: dynamic,
//                          weight_block_size: [128, 128], modules_to_not_convert and
//                          ignored_layers: the linears kept in BF16}
//   model.safetensors     or model-0000i-of-0000n.safetensors + model.safetensors.index.json
//                         when the tensors exceed max_shard_bytes
//   tokenizer files       tokenizer.json, tokenizer_config.json, special_tokens_map.json,
//                         generation_config.json copied from the source directory when present
// Tensors: norm weights F32 (the engines apply them in FP32; they are a few kilobytes), every
// other tensor BF16, except, in the FP8 format, each linear the trainer runs in FP8: its E4M3
// codes and 128x128 scale_inv exactly as the trainer quantized them (the bytes the generator
// ran). Loading such a directory back installs those bytes unchanged (Transformer::
// install_fp8_weights), so a BF16 or FP8 policy reloads with bit-identical log-probs.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>

#include "core/dtype.h"
#include "model/transformer.h"

namespace fp8rl {

// Reads DIR's weights into `model` (whose config must be load_model_config(DIR)) and refreshes
// its low-precision copies; FP8-stored linears that the model runs in FP8 get the stored bytes.
void load_model_weights(const std::filesystem::path& dir, Transformer& model);

// Before a model of `config` is allocated: checks DIR's weight files against it from their headers
// alone (every tensor present, with its shape and a dtype fp8rl reads), and that its parameters,
// at `bytes_per_param` bytes each (the least `use` needs), fit in the memory the machine has
// available. Errors name the file and tensor, or the figures.
void check_model_directory(const std::filesystem::path& dir, const ModelConfig& config, double bytes_per_param,
                           const char* use);

// DIR's model as a frozen Transformer under `policy` (forward only: generation, calibration,
// a reference policy), streamed: each tensor goes from the file to its final precision in bands
// of rows (BF16 copies, FP8 codes quantized 128 rows at a time, stored FP8 bytes as they are), so
// no FP32 master and no FP32 copy of a whole large tensor ever exists. The same forward bits as
// load_model_weights into a trainable model of that policy. `band_rows` (a multiple of 128) is the
// piece size.
Transformer load_frozen_model(const std::filesystem::path& dir, const PrecisionPolicy& policy, int64_t band_rows = 1024);

// Exports write DType::kBF16 weights, or DType::kE4M3 codes with their FP32 block scales ("fp8").
const char* hf_export_format_name(DType format);

struct HfExportOptions {
  DType format = DType::kBF16;
  std::filesystem::path source_dir;     // tokenizer files and config.json keys come from here (may be empty)
  int64_t max_shard_bytes = int64_t{4} << 30;  // tensors per shard file, at most (one tensor may exceed it)
};

// Writes `model` as a HF model directory at DIR (replacing any directory there, atomically).
void export_hf_model(const std::filesystem::path& dir, const Transformer& model, const HfExportOptions& options);

}  // namespace fp8rl
