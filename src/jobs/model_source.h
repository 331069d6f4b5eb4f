// Where a job's model and tokenizer come from.
//
//   model.name or model.checkpoint = DIR   a Hugging Face model directory (fp8rl checkpoints are
//                                          ones too): DIR/config.json gives the architecture,
//                                          the safetensors files the weights (model/hf_weights.h),
//                                          DIR/tokenizer.json the tokenizer with the framing of
//                                          tokenizer.chat_format (tokenizer.name=char, or an fp8rl
//                                          checkpoint of a character-vocabulary model: the built-in
//                                          character vocabulary, vocab_size 99)
//   neither                                a random model of model.preset (model.seed) and the
//                                          character vocabulary
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "model/hf_weights.h"
#include "model/transformer.h"
#include "jobs/recipe.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

// The tokenizer of model directory `dir`: DIR/tokenizer.json with `chat_format`; the character
// vocabulary when `dir` is empty, when it has no tokenizer.json and its config.json says
// "fp8rl_tokenizer": "char" (an fp8rl checkpoint of such a model), or with TokenizerChoice::kChar. A model directory without
// tokenizer.json is otherwise an error. Checks that the ids fit the model's vocabulary.
std::unique_ptr<Tokenizer> load_model_tokenizer(const std::filesystem::path& dir, std::string_view chat_format,
                                                const ModelConfig& model,
                                                TokenizerChoice choice = TokenizerChoice::kAuto);
// load_model_tokenizer for the job's model directory and tokenizer.chat_format.
std::unique_ptr<Tokenizer> load_job_tokenizer(const RunConfig& config, const ModelConfig& model);
// The job's model with the trainer's precision policy: DIR's weights, or a random initialisation.
Transformer load_job_model(const RunConfig& config);

// Writes the exports checkpointing.export_hf and checkpointing.export_fp8 ask for, LOG_DIR/hf and
// LOG_DIR/hf-fp8 (model/hf_weights.h), with the tokenizer files of the model directory. An FP8
// export of a policy that does not train in FP8 quantizes its masters with the same rule.
void export_job_model(const RunConfig& config, const Transformer& model);

// `fp8rl export`: the model directory `from` (a checkpoint or any HF directory) written to `to` in
// `format`, its linears quantized under `policy` for the FP8 format. `to` is written beside
// itself and renamed into place; it must not be (or contain) `from`, and an existing non-empty
// `to` is replaced only with `force`.
void export_model_directory(const std::filesystem::path& from, const std::filesystem::path& to, DType format,
                            const PrecisionPolicy& policy, bool force = false);

// The ids of each example's prompt, checked to fit the model with `max_new_tokens` more
// (errors name the split and the example).
std::vector<std::vector<int32_t>> encode_prompts(const Tokenizer& tokenizer, const std::vector<Example>& examples,
                                                 int64_t max_new_tokens, int64_t max_seq_len, const char* split);

}  // namespace fp8rl
