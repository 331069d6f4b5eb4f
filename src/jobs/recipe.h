// The run configuration of every fp8rl job (SFT, evaluation, GRPO), bound once to the config
// schema (io/config.h): the field list below is the single source of defaults, help text,
// validation and the printed effective configuration. Key names follow NeMo RL where the concept
// is shared.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "generation/engine.h"
#include "io/config.h"
#include "arch/config.h"
#include "model/optimizer.h"
#include "arch/precision.h"
#include "rl/advantages.h"
#include "rl/grpo_loss.h"
#include "rl/refit.h"
#include "tasks/arithmetic.h"
#include "tasks/environment.h"
#include "tasks/jsonl_task.h"
#include "tasks/reward.h"
#include "tasks/running_sum.h"
#include "tasks/sandbox.h"
#include "tasks/task.h"

namespace fp8rl {

// Enum-like recipe keys are parsed once, at the schema (ConfigSchema::add_enum), into these types;
// nothing past bind_run_config compares their names.
enum class TokenizerChoice : uint8_t { kAuto, kChar };          // tokenizer.name: auto | char
enum class ReleaseMemory : uint8_t { kAuto, kAlways, kNever };  // policy.release_memory_between_phases: auto | true | false
enum class TaskKind : uint8_t { kArithmetic, kRunningSum, kJsonl };  // task.name
// generation.kv_calibration_data: batch | batch_and_next_prompts | next_prompts
enum class KvCalibrationData : uint8_t { kBatch, kBatchAndNextPrompts, kNextPrompts };

struct RunConfig {
  // Identity and output.
  std::string name;     // run name; the run directory is logger.log_dir
  std::string log_dir;  // logger.log_dir
  bool tensorboard_enabled = false;  // logger.tensorboard_enabled: TensorBoard event files in log_dir

  // Model.
  std::string model_preset;                     // model.preset
  std::optional<std::string> model_name;        // model.name: a Hugging Face model directory
  std::optional<std::string> model_checkpoint;  // model.checkpoint: start from these weights
  TokenizerChoice tokenizer = TokenizerChoice::kAuto;  // tokenizer.name
  std::string chat_format;                      // tokenizer.chat_format
  int64_t model_seed = 0;                       // model.seed: random init when no checkpoint
  int64_t max_seq_len = 0;                      // model.max_seq_len

  // Trainer precision (policy.*).
  Precision precision = Precision::kBF16;   // policy.precision: fp32 | bf16 | fp8
  int64_t num_first_layers_in_bf16 = 0;     // policy.fp8.num_first_layers_in_bf16
  int64_t num_last_layers_in_bf16 = 0;      // policy.fp8.num_last_layers_in_bf16
  std::vector<std::string> ignore_layers;   // policy.fp8.ignore_layers (name substrings kept BF16)
  bool pow2_weight_scaling_factors = false;
  bool pow2_activation_scaling_factors = false;
  bool fp32_lm_head = false;                // policy.fp32_lm_head
  Precision attention_precision = Precision::kF32;  // policy.attention_precision: fp32 | bf16
  bool fp8_kv_attention = false;            // policy.fp8_kv_attention (with an FP8 KV cache)
  bool activation_checkpointing = false;    // policy.activation_checkpointing
  bool router_replay = false;               // policy.router_replay (MoE, GRPO)
  bool freeze_router = false;               // policy.freeze_router (MoE)
  double aux_loss_coef = 0.0;               // policy.aux_loss_coef (MoE load balancing)
  ReleaseMemory release_memory_between_phases = ReleaseMemory::kAuto;  // policy.release_memory_between_phases

  // Optimizer and schedule (policy.optimizer.*, policy.scheduler.*).
  AdamWConfig adam;
  bool offload_moments = false;  // policy.optimizer.offload_moments
  LrSchedule schedule;
  int64_t train_global_batch_size = 0;  // policy.train_global_batch_size (sequences per optimizer step)
  int64_t train_micro_batch_size = 0;   // policy.train_micro_batch_size

  // Task.
  TaskKind task = TaskKind::kArithmetic;  // task.name: arithmetic | running_sum | jsonl
  ArithmeticTaskConfig arithmetic;
  RunningSumTaskConfig running_sum;
  JsonlTaskConfig jsonl;
  RewardConfig reward;  // task.reward.*: a plug-in or the built-in scorer
  EnvironmentConfig environment;  // task.environment.*: multi-turn (GRPO's generator)
  SandboxLimits sandbox;          // task.sandbox.*: model-written code's limits

  // SFT.
  int64_t sft_max_num_steps = 0;  // sft.max_num_steps
  int64_t sft_max_consecutive_skipped_steps = 0;  // sft.max_consecutive_skipped_steps (0: never stop)
  int64_t sft_val_period = 0;     // sft.val_period (0: only at the end)
  int64_t sft_seed = 0;           // sft.seed: order of training examples

  // Evaluation.
  int64_t val_max_examples = 0;  // eval.max_examples: validation examples scored
  int64_t max_new_tokens = 0;    // generation.max_new_tokens

  // GRPO (grpo.*).
  int64_t num_prompts_per_step = 0;
  int64_t num_generations_per_prompt = 0;
  int64_t grpo_max_num_steps = 0;
  int64_t grpo_max_consecutive_skipped_steps = 0;  // grpo.max_consecutive_skipped_steps (0: never stop)
  int64_t grpo_val_period = 0;
  int64_t grpo_seed = 0;
  AdvantageConfig advantages;
  GrpoLossConfig loss;                     // loss_fn.*
  bool allow_fp8_generation_without_is = false;  // loss_fn.allow_fp8_generation_without_is
  int64_t save_period = 0;                 // checkpointing.save_period (0: at the end only)
  bool export_hf = false;                  // checkpointing.export_hf
  bool export_fp8 = false;                 // checkpointing.export_fp8

  // Generator (generation.*).
  Precision generation_precision = Precision::kBF16;  // generation.precision: bf16 | fp8 (generator linears)
  std::optional<int64_t> generation_num_first_layers_in_bf16;  // per-engine overrides of policy.fp8.*
  std::optional<int64_t> generation_num_last_layers_in_bf16;
  DType kv_cache_dtype = DType::kBF16;  // generation.kv_cache_dtype: bf16 | fp8 (kE4M3)
  bool fp8_attention = true;         // generation.fp8_attention (with an FP8 KV cache)
  bool batch_invariant = true;       // generation.batch_invariant
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  int64_t kv_cache_bytes = 0;
  int64_t max_num_seqs = 0;
  bool share_prefix = true;
  int64_t kv_calibration_samples_per_prompt = 0;  // generation.kv_calibration_samples_per_prompt
  KvScaleGranularity kv_scale_granularity = KvScaleGranularity::kLayer;  // generation.kv_scale_granularity
  KvCalibrationData kv_calibration_data = KvCalibrationData::kBatch;  // generation.kv_calibration_data
  double kv_scale_margin = 1.05;                  // generation.kv_scale_margin

  // The trainer's precision policy these fields describe.
  PrecisionPolicy trainer_policy() const;
  // The generator's precision policy: the trainer's options with generation.* overrides.
  PrecisionPolicy generator_policy() const;
  EngineOptions engine_options() const;
  // Throws for combinations the recipe forbids (FP8 generation without importance sampling).
  void validate_grpo() const;
  // The model architecture (preset, vocabulary of the task's tokenizer, max_seq_len).
  ModelConfig model_config() const;
  // The directory the model starts from: model.name or model.checkpoint (at most one may be set).
  std::optional<std::string> model_dir() const;
};

// Registers every field of `config` (with its default) in `schema`.
void bind_run_config(ConfigSchema& schema, RunConfig& config);

// The task named by the config (train and validation splits, verifier).
std::unique_ptr<Task> make_task(const RunConfig& config);

}  // namespace fp8rl
