#include "jobs/recipe.h"

#include "core/check.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl {

namespace {

// The recipe's names of `values`.
std::vector<std::pair<std::string, Precision>> precision_names(std::initializer_list<Precision> values) {
  std::vector<std::pair<std::string, Precision>> names;
  for (Precision p : values) names.emplace_back(precision_name(p), p);
  return names;
}

const std::vector<std::pair<std::string, DType>> kKvCacheDtypeNames = {{"bf16", DType::kBF16}, {"fp8", DType::kE4M3}};

}  // namespace

void bind_run_config(ConfigSchema& s, RunConfig& c) {
  s.add("run.name", &c.name, "fp8rl", "name of the run");
  s.add("logger.log_dir", &c.log_dir, "runs/fp8rl", "run directory: config.yaml, metrics.jsonl, checkpoints");
  s.add("logger.tensorboard_enabled", &c.tensorboard_enabled, false,
        "also write the metrics as TensorBoard scalars (events.out.tfevents.* in the run directory)");

  s.add("model.preset", &c.model_preset, "small", "architecture preset (tiny-moe, small-moe: Qwen3-MoE; qwen3-0.6b, llama-3.2-1b: real shapes, random weights)")
      .choices({"tiny", "small", "medium", "tiny-moe", "small-moe", "qwen3-0.6b", "llama-3.2-1b"});
  s.add("model.name", &c.model_name, std::nullopt,
        "Hugging Face model directory to start from: config.json, safetensors weights, tokenizer.json (null: "
        "model.checkpoint, else a random model of model.preset)");
  s.add("model.checkpoint", &c.model_checkpoint, std::nullopt,
        "checkpoint directory to start from (an fp8rl checkpoint or any model directory model.name takes)");
  s.add_enum("tokenizer.name", &c.tokenizer, TokenizerChoice::kAuto, {{"auto", TokenizerChoice::kAuto}, {"char", TokenizerChoice::kChar}},
        "auto: a model directory's tokenizer.json (required there), the character vocabulary for a random model; "
        "char: the built-in character vocabulary");
  s.add("tokenizer.chat_format", &c.chat_format, "auto",
        "framing of prompts for a model directory's tokenizer.json (auto: from its special tokens)")
      .choices({"auto", "llama3", "qwen3", "chatml", "none"});
  s.add("model.seed", &c.model_seed, 1, "seed of the random initialisation").at_least(0);
  s.add("model.max_seq_len", &c.max_seq_len, 64, "longest sequence (prompt + response) in tokens").range(8, 40960);

  s.add_enum("policy.precision", &c.precision, Precision::kBF16,
             precision_names({Precision::kF32, Precision::kBF16, Precision::kFP8}), "trainer linear layers");
  s.add("policy.fp8.num_first_layers_in_bf16", &c.num_first_layers_in_bf16, 0,
        "transformer layers at the start kept in BF16").at_least(0);
  s.add("policy.fp8.num_last_layers_in_bf16", &c.num_last_layers_in_bf16, 0,
        "transformer layers at the end kept in BF16").at_least(0);
  s.add("policy.fp8.ignore_layers", &c.ignore_layers, {}, "linears whose name contains one of these stay BF16");
  s.add("policy.fp8.pow2_weight_scaling_factors", &c.pow2_weight_scaling_factors, false,
        "power-of-two weight scales");
  s.add("policy.fp8.pow2_activation_scaling_factors", &c.pow2_activation_scaling_factors, false,
        "power-of-two activation and gradient scales");
  s.add("policy.fp32_lm_head", &c.fp32_lm_head, false, "LM head in FP32 (on every path that computes log-probs)");
  s.add_enum("policy.attention_precision", &c.attention_precision, Precision::kF32,
             precision_names({Precision::kF32, Precision::kBF16}),
        "attention products (Q K^T, P V and their gradients) in both engines: fp32, or bf16 operands with FP32 "
        "accumulation (P and dS rounded to BF16)");
  s.add_enum("policy.release_memory_between_phases", &c.release_memory_between_phases, ReleaseMemory::kAuto,
             {{"auto", ReleaseMemory::kAuto}, {"true", ReleaseMemory::kAlways}, {"false", ReleaseMemory::kNever}},
        "GRPO frees each phase's buffers when it ends (KV pages, packed generator weights, activations, "
        "gradients); auto: for models of 100 M parameters or more");
  s.add("policy.activation_checkpointing", &c.activation_checkpointing, false,
        "keep only each layer's input for backward and recompute the rest layer by layer (the same bits; "
        "about a third more trainer FLOPs, activation memory a layer's instead of the model's)");
  s.add("policy.router_replay", &c.router_replay, false,
        "MoE, GRPO: the trainer's forwards take the experts the generator chose for each token (its router "
        "still computes the weights and gets their gradient); for generators that do not route as the trainer "
        "does. routing_mismatch still reports the router's own choices");
  s.add("policy.freeze_router", &c.freeze_router, false,
        "MoE: the routers' weights are not trained (no gradient, no update, no decay); the gradient still "
        "flows through the routing weights to the layers below");
  s.add("policy.aux_loss_coef", &c.aux_loss_coef, 0.0,
        "MoE: weight of the load-balancing loss (Switch / HF Qwen3-MoE load_balancing_loss_func: E sum_e f_e P_e "
        "over every MoE layer's real tokens; uniform routing gives k) added to the training loss; reported as "
        "moe_aux_loss")
      .at_least(0);
  s.add("policy.fp8_kv_attention", &c.fp8_kv_attention, false,
        "with an FP8 KV cache, the trainer's attention reads the generator's E4M3 Q/K/V values "
        "(same scales; straight-through backward)");

  s.add("policy.optimizer.lr", &c.adam.lr, 1e-3, "AdamW learning rate").greater_than(0);
  s.add("policy.optimizer.weight_decay", &c.adam.weight_decay, 0.01, "decoupled weight decay (matrices only)").at_least(0);
  s.add("policy.optimizer.beta1", &c.adam.beta1, 0.9, "AdamW beta1").range(0, 0.999999);
  s.add("policy.optimizer.beta2", &c.adam.beta2, 0.999, "AdamW beta2").range(0, 0.999999);
  s.add("policy.optimizer.eps", &c.adam.eps, 1e-8, "AdamW epsilon").greater_than(0);
  s.add("policy.optimizer.offload_moments", &c.offload_moments, false,
        "AdamW's moments (8 bytes per parameter) live in an unnamed spill file on the run directory's file system "
        "and each optimizer step streams them through; the page cache holds them while memory allows (the same "
        "bits)");
  s.add("policy.max_grad_norm", &c.adam.max_grad_norm, 1.0, "global gradient-norm clip (0: off)").at_least(0);
  s.add_enum("policy.scheduler.kind", &c.schedule.kind, LrScheduleKind::kConstant,
             {{"constant", LrScheduleKind::kConstant}, {"cosine", LrScheduleKind::kCosine}},
             "learning-rate schedule after warmup");
  s.add("policy.scheduler.warmup_steps", &c.schedule.warmup_steps, 10, "linear warmup steps").at_least(0);
  s.add("policy.scheduler.min_lr", &c.schedule.min_lr, 0.0, "cosine floor").at_least(0);
  s.add("policy.train_global_batch_size", &c.train_global_batch_size, 64, "sequences per optimizer step").at_least(1);
  s.add("policy.train_micro_batch_size", &c.train_micro_batch_size, 64,
        "sequences per forward/backward (gradients accumulate over micro-batches)").at_least(1);

  s.add_enum("task.name", &c.task, TaskKind::kArithmetic,
             {{"arithmetic", TaskKind::kArithmetic}, {"running_sum", TaskKind::kRunningSum}, {"jsonl", TaskKind::kJsonl}},
             "task: arithmetic (short answers), running_sum (long answers: every running total of keyed terms), "
             "jsonl (a dataset)");
  s.add("task.jsonl.train_path", &c.jsonl.train_path, "", "JSONL file of {prompt, answer} lines (task.name: jsonl)");
  s.add("task.jsonl.validation_path", &c.jsonl.validation_path, "", "JSONL validation file (task.name: jsonl)");
  s.add("task.jsonl.prompt_key", &c.jsonl.prompt_key, "prompt", "field of a JSONL line holding the prompt");
  s.add("task.jsonl.answer_key", &c.jsonl.answer_key, "answer",
        "field holding the reference answer (GSM8K-style '... #### 42' keeps what follows the last ####)");
  s.add("task.jsonl.max_line_bytes", &c.jsonl.max_line_bytes, c.jsonl.max_line_bytes,
        "longest JSONL line accepted (a longer one is refused before it is parsed)")
      .at_least(2);
  bind_arithmetic_task_config(s, "task.arithmetic", c.arithmetic);
  bind_running_sum_task_config(s, "task.running_sum", c.running_sum);
  bind_reward_config(s, "task.reward", c.reward);
  bind_environment_config(s, "task.environment", c.environment);
  bind_sandbox_limits(s, "task.sandbox", c.sandbox);

  s.add("sft.max_num_steps", &c.sft_max_num_steps, 300, "SFT optimizer steps").at_least(1);
  s.add("sft.max_consecutive_skipped_steps", &c.sft_max_consecutive_skipped_steps, 3,
        "stop the run (exit 1) after this many optimizer steps in a row skipped for a non-finite loss or gradient "
        "(0: never)")
      .at_least(0);
  s.add("sft.val_period", &c.sft_val_period, 0, "evaluate every this many SFT steps (0: at the end only)").at_least(0);
  s.add("sft.seed", &c.sft_seed, 1, "seed of the SFT example order").at_least(0);

  s.add("grpo.num_prompts_per_step", &c.num_prompts_per_step, 16, "prompts drawn per step").at_least(1);
  s.add("grpo.num_generations_per_prompt", &c.num_generations_per_prompt, 8, "responses per prompt (G)").at_least(1);
  s.add("grpo.max_num_steps", &c.grpo_max_num_steps, 20, "GRPO steps").at_least(1);
  s.add("grpo.max_consecutive_skipped_steps", &c.grpo_max_consecutive_skipped_steps, 3,
        "stop the run (exit 1) after this many optimizer steps in a row skipped for a non-finite loss or gradient "
        "(0: never)")
      .at_least(0);
  s.add("grpo.val_period", &c.grpo_val_period, 10, "validate every this many steps (0: start and end only)").at_least(0);
  s.add("grpo.seed", &c.grpo_seed, 1, "seed of prompt draws and sampling").at_least(0);
  s.add("grpo.normalize_rewards", &c.advantages.normalize_rewards, true, "divide advantages by the group std + 1e-6");
  s.add("grpo.use_leave_one_out_baseline", &c.advantages.use_leave_one_out_baseline, true,
        "baseline excludes the response itself");
  s.add("loss_fn.ratio_clip_min", &c.loss.ratio_clip_min, 0.2, "eps_low of the PPO clip").range(0, 1);
  s.add("loss_fn.ratio_clip_max", &c.loss.ratio_clip_max, 0.2, "eps_high of the PPO clip").at_least(0);
  s.add("loss_fn.use_importance_sampling_correction", &c.loss.use_importance_sampling_correction, true,
        "weight the policy term by exp(prev - gen)");
  s.add("loss_fn.truncated_importance_sampling_ratio", &c.loss.truncated_importance_sampling_ratio, std::nullopt,
        "C: upper bound of the importance weight (null: no truncation)")
      .greater_than(0);
  s.add("loss_fn.truncated_importance_sampling_ratio_min", &c.loss.truncated_importance_sampling_ratio_min, 0.0,
        "lower bound of the importance weight").at_least(0);
  s.add_enum("loss_fn.truncated_importance_sampling_type", &c.loss.truncated_importance_sampling_type,
             TruncatedIsType::kTis, truncated_is_type_names(), "tis: clamp; icepop: zero tokens; seq-mask-tis: zero sequences");
  s.add("loss_fn.sequence_level_importance_ratios", &c.loss.sequence_level_importance_ratios, false,
        "GSPO-style sequence-level ratios");
  s.add("loss_fn.reference_policy_kl_penalty", &c.loss.reference_policy_kl_penalty, 0.01, "beta of the KL term")
      .at_least(0);
  s.add_enum("loss_fn.reference_policy_kl_type", &c.loss.reference_policy_kl_type, KlType::kK3, kl_type_names(),
             "KL estimator");
  s.add("loss_fn.token_level_loss", &c.loss.token_level_loss, true,
        "mean over the global batch's tokens (false: mean of per-sequence means)");
  s.add("loss_fn.allow_fp8_generation_without_is", &c.allow_fp8_generation_without_is, false,
        "permit FP8 generation without importance-sampling correction");
  s.add("checkpointing.save_period", &c.save_period, 0, "save a checkpoint every this many steps (0: at the end)")
      .at_least(0);
  s.add("checkpointing.export_hf", &c.export_hf, false,
        "at the end, also write the policy as a Hugging Face directory in BF16 (LOG_DIR/hf)");
  s.add("checkpointing.export_fp8", &c.export_fp8, false,
        "at the end, also write an FP8 export for vLLM / SGLang: the trainer's E4M3 weights and 128x128 scales "
        "(LOG_DIR/hf-fp8)");

  s.add_enum("generation.precision", &c.generation_precision, Precision::kBF16,
             precision_names({Precision::kBF16, Precision::kFP8}), "generator linear layers");
  s.add("generation.fp8.num_first_layers_in_bf16", &c.generation_num_first_layers_in_bf16, std::nullopt,
        "generator override of policy.fp8.num_first_layers_in_bf16 (null: same as the trainer)");
  s.add("generation.fp8.num_last_layers_in_bf16", &c.generation_num_last_layers_in_bf16, std::nullopt,
        "generator override of policy.fp8.num_last_layers_in_bf16 (null: same as the trainer)");
  s.add_enum("generation.kv_cache_dtype", &c.kv_cache_dtype, DType::kBF16, kKvCacheDtypeNames, "KV cache storage");
  s.add("generation.fp8_attention", &c.fp8_attention, true, "with an FP8 KV cache, quantize Q too (FP8 attention)");
  s.add("generation.temperature", &c.temperature, 1.0, "sampling temperature").at_least(0);
  s.add("generation.top_p", &c.top_p, 1.0, "nucleus sampling mass").range(1e-6, 1);
  s.add("generation.top_k", &c.top_k, 0, "top-k sampling (0: off)").at_least(0);
  s.add("generation.kv_cache_bytes", &c.kv_cache_bytes, 64 << 20, "KV cache budget in bytes").at_least(1024);
  s.add("generation.max_num_seqs", &c.max_num_seqs, 256, "sequences decoded together").at_least(1);
  s.add("generation.kv_calibration_samples_per_prompt", &c.kv_calibration_samples_per_prompt, 0,
        "FP8 KV: responses per prompt of the batch just trained on that recalibrate the Q/K/V scales (0: all)")
      .at_least(0);
  s.add_enum("generation.kv_scale_granularity", &c.kv_scale_granularity, KvScaleGranularity::kLayer,
             {{"layer", KvScaleGranularity::kLayer}, {"head", KvScaleGranularity::kHead}},
        "FP8 KV: one Q/K/V scale per layer, or per KV head (q per KV head's group of query heads)");
  s.add_enum("generation.kv_calibration_data", &c.kv_calibration_data, KvCalibrationData::kBatch,
             {{"batch", KvCalibrationData::kBatch},
              {"batch_and_next_prompts", KvCalibrationData::kBatchAndNextPrompts},
              {"next_prompts", KvCalibrationData::kNextPrompts}},
        "FP8 KV: what recalibrates the scales after a step: the batch just trained on, that and the "
        "next step's prompts, or the next step's prompts only (all with the new weights)");
  s.add("generation.kv_scale_margin", &c.kv_scale_margin, 1.05,
        "FP8 KV: scale = margin * amax / 448 (headroom over the calibration's amax)")
      .range(1.0, 16.0);
  s.add("generation.share_prefix", &c.share_prefix, true, "the samples of a prompt share its prefill");
  s.add("generation.batch_invariant", &c.batch_invariant, true,
        "generator linears give the trainer's bits whatever the batch (false: a lone sequence may decode on a "
        "faster path, agreement to the last place only)");

  s.add("eval.max_examples", &c.val_max_examples, 200, "validation examples scored per evaluation").at_least(1);
  s.add("generation.max_new_tokens", &c.max_new_tokens, 8, "longest response in tokens").range(1, 4096);
}

PrecisionPolicy RunConfig::trainer_policy() const {
  PrecisionPolicy p = precision == Precision::kF32 ? PrecisionPolicy::fp32() : PrecisionPolicy{};
  p.linear = precision;
  p.num_first_layers_in_bf16 = num_first_layers_in_bf16;
  p.num_last_layers_in_bf16 = num_last_layers_in_bf16;
  p.bf16_linear_substrings = ignore_layers;
  p.weight_scale_format = pow2_weight_scaling_factors ? ScaleFormat::kPow2 : ScaleFormat::kFp32;
  p.activation_scale_format = pow2_activation_scaling_factors ? ScaleFormat::kPow2 : ScaleFormat::kFp32;
  p.attention = attention_precision;
  p.fp32_lm_head = fp32_lm_head || precision == Precision::kF32;
  p.validate();
  return p;
}

PrecisionPolicy RunConfig::generator_policy() const {
  PrecisionPolicy p = trainer_policy();
  p.activations = Precision::kBF16;
  p.linear = generation_precision;
  if (generation_num_first_layers_in_bf16) p.num_first_layers_in_bf16 = *generation_num_first_layers_in_bf16;
  if (generation_num_last_layers_in_bf16) p.num_last_layers_in_bf16 = *generation_num_last_layers_in_bf16;
  p.fp32_lm_head = fp32_lm_head;  // identical on both sides: the largest mismatch source otherwise
  p.validate();
  return p;
}

EngineOptions RunConfig::engine_options() const {
  EngineOptions e;
  e.kv_dtype = kv_cache_dtype;
  e.fp8_attention = fp8_attention;
  e.kv_cache_bytes = kv_cache_bytes;
  e.max_num_seqs = max_num_seqs;
  e.batch_invariant = batch_invariant;
  return e;
}

void RunConfig::validate_grpo() const {
  FP8RL_REQUIRE(precision != Precision::kF32,
                "GRPO runs bf16 or fp8 trainers (policy.precision: fp32 is for reference checks)");
  const bool fp8_generation = generation_precision == Precision::kFP8 || kv_cache_dtype == DType::kE4M3;
  FP8RL_REQUIRE(!fp8_generation || loss.use_importance_sampling_correction || allow_fp8_generation_without_is,
              "FP8 generation (generation.precision: {}, generation.kv_cache_dtype: {}) needs "
              "loss_fn.use_importance_sampling_correction: true (or loss_fn.allow_fp8_generation_without_is: true)",
              precision_name(generation_precision), kv_dtype_name(kv_cache_dtype));
  FP8RL_REQUIRE(!fp8_kv_attention || kv_cache_dtype == DType::kE4M3,
              "policy.fp8_kv_attention: true needs generation.kv_cache_dtype: fp8 (got {})", kv_dtype_name(kv_cache_dtype));
  validate_grpo_loss_config(loss);
}

ModelConfig RunConfig::model_config() const {
  ModelConfig m = ::fp8rl::model_preset(model_preset, CharTokenizer::kVocabSize);
  m.max_seq_len = max_seq_len;
  m.validate();
  return m;
}

std::optional<std::string> RunConfig::model_dir() const {
  FP8RL_REQUIRE(!(model_name && model_checkpoint), "model.name ('{}') and model.checkpoint ('{}') are both set; keep one",
              *model_name, *model_checkpoint);
  return model_name ? model_name : model_checkpoint;
}

std::unique_ptr<Task> make_task(const RunConfig& config) {
  switch (config.task) {
    case TaskKind::kJsonl:
      FP8RL_REQUIRE(!config.jsonl.train_path.empty() && !config.jsonl.validation_path.empty(),
                    "task.name: jsonl needs task.jsonl.train_path and task.jsonl.validation_path");
      return std::make_unique<JsonlTask>(config.jsonl);
    case TaskKind::kRunningSum: return std::make_unique<RunningSumTask>(config.running_sum);
    case TaskKind::kArithmetic: break;
  }
  return std::make_unique<ArithmeticTask>(config.arithmetic);
}

}  // namespace fp8rl
