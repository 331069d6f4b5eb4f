#include "rl/recipe.h"

#include "core/check.h"
#include "tasks/char_tokenizer.h"

namespace fp8rl {

void bind_run_config(ConfigSchema& s, RunConfig& c) {
  s.add("run.name", &c.name, "fp8rl", "name of the run");
  s.add("logger.log_dir", &c.log_dir, "runs/fp8rl", "run directory: config.yaml, metrics.jsonl, checkpoints");

  s.add("model.preset", &c.model_preset, "small", "architecture preset").choices({"tiny", "small", "medium"});
  s.add("model.checkpoint", &c.model_checkpoint, std::nullopt,
        "checkpoint directory to start from (null: random initialisation)");
  s.add("model.seed", &c.model_seed, 1, "seed of the random initialisation").at_least(0);
  s.add("model.max_seq_len", &c.max_seq_len, 64, "longest sequence (prompt + response) in tokens").range(8, 4096);

  s.add("policy.precision", &c.precision, "bf16", "trainer linear layers").choices({"fp32", "bf16", "fp8"});
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

  s.add("policy.optimizer.lr", &c.adam.lr, 1e-3, "AdamW learning rate").greater_than(0);
  s.add("policy.optimizer.weight_decay", &c.adam.weight_decay, 0.01, "decoupled weight decay (matrices only)").at_least(0);
  s.add("policy.optimizer.beta1", &c.adam.beta1, 0.9, "AdamW beta1").range(0, 0.999999);
  s.add("policy.optimizer.beta2", &c.adam.beta2, 0.999, "AdamW beta2").range(0, 0.999999);
  s.add("policy.optimizer.eps", &c.adam.eps, 1e-8, "AdamW epsilon").greater_than(0);
  s.add("policy.max_grad_norm", &c.adam.max_grad_norm, 1.0, "global gradient-norm clip (0: off)").at_least(0);
  s.add("policy.scheduler.kind", &c.schedule.kind, "constant", "learning-rate schedule after warmup")
      .choices({"constant", "cosine"});
  s.add("policy.scheduler.warmup_steps", &c.schedule.warmup_steps, 10, "linear warmup steps").at_least(0);
  s.add("policy.scheduler.min_lr", &c.schedule.min_lr, 0.0, "cosine floor").at_least(0);
  s.add("policy.train_global_batch_size", &c.train_global_batch_size, 64, "sequences per optimizer step").at_least(1);
  s.add("policy.train_micro_batch_size", &c.train_micro_batch_size, 64,
        "sequences per forward/backward (gradients accumulate over micro-batches)").at_least(1);

  s.add("task.name", &c.task_name, "arithmetic", "task").choices({"arithmetic"});
  s.add("task.arithmetic.min_operand_digits", &c.arithmetic.min_operand_digits, 1, "fewest digits of an operand")
      .range(1, 9);
  s.add("task.arithmetic.max_operand_digits", &c.arithmetic.max_operand_digits, 2, "most digits of an operand")
      .range(1, 9);
  s.add("task.arithmetic.operators", &c.arithmetic.operators, "+-", "operators drawn from (a subset of '+-*')");
  s.add("task.arithmetic.seed", &c.arithmetic.seed, 1, "seed of the train and validation splits");
  s.add("task.arithmetic.train_size", &c.arithmetic.train_size, 20000, "training examples").at_least(1);
  s.add("task.arithmetic.val_size", &c.arithmetic.val_size, 500, "validation examples").at_least(1);

  s.add("sft.max_num_steps", &c.sft_max_num_steps, 300, "SFT optimizer steps").at_least(1);
  s.add("sft.val_period", &c.sft_val_period, 0, "evaluate every this many SFT steps (0: at the end only)").at_least(0);
  s.add("sft.seed", &c.sft_seed, 1, "seed of the SFT example order").at_least(0);

  s.add("eval.max_examples", &c.val_max_examples, 200, "validation examples scored per evaluation").at_least(1);
  s.add("generation.max_new_tokens", &c.max_new_tokens, 8, "longest response in tokens").range(1, 4096);
}

PrecisionPolicy RunConfig::trainer_policy() const {
  PrecisionPolicy p = precision == "fp32" ? PrecisionPolicy::fp32() : PrecisionPolicy{};
  p.linear = parse_precision(precision);
  p.num_first_layers_in_bf16 = num_first_layers_in_bf16;
  p.num_last_layers_in_bf16 = num_last_layers_in_bf16;
  p.bf16_linear_substrings = ignore_layers;
  p.weight_scale_format = pow2_weight_scaling_factors ? ScaleFormat::kPow2 : ScaleFormat::kFp32;
  p.activation_scale_format = pow2_activation_scaling_factors ? ScaleFormat::kPow2 : ScaleFormat::kFp32;
  p.fp32_lm_head = fp32_lm_head || precision == "fp32";
  p.validate();
  return p;
}

ModelConfig RunConfig::model_config() const {
  ModelConfig m = ::fp8rl::model_preset(model_preset, CharTokenizer::kVocabSize);
  m.max_seq_len = max_seq_len;
  m.validate();
  return m;
}

std::unique_ptr<Task> make_task(const RunConfig& config) {
  FP8RL_CHECK(config.task_name == "arithmetic", "unknown task '{}'", config.task_name);
  return std::make_unique<ArithmeticTask>(config.arithmetic);
}

}  // namespace fp8rl
