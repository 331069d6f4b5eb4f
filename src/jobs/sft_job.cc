#include "jobs/sft_job.h"

#include <fmt/format.h>

#include <fstream>
#include <optional>

#include "core/check.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "io/metrics_log.h"
#include "io/run_lock.h"
#include "io/tfevents.h"
#include "model/checkpoint.h"
#include "rl/data_parallel.h"
#include "jobs/evaluate.h"
#include "rl/sft.h"
#include "jobs/model_source.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

std::vector<SftExample> tokenize_examples(const std::vector<Example>& examples, const Tokenizer& tok) {
  std::vector<SftExample> out;
  out.reserve(examples.size());
  for (const Example& e : examples) out.push_back({tok.encode_prompt(e.prompt), tok.encode_answer(e.answer)});
  return out;
}

}  // namespace

SftJobResult run_sft_job(const RunConfig& config, const std::string& effective_yaml) {
  // Everything that can fail on bad input happens before the run directory is touched.
  const std::unique_ptr<Task> task = make_task(config);
  Transformer model = load_job_model(config);
  const std::unique_ptr<Tokenizer> tokenizer = load_job_tokenizer(config, model.config());
  const Tokenizer& tok = *tokenizer;
  const std::vector<SftExample> train = tokenize_examples(task->train(), tok);
  for (size_t i = 0; i < train.size(); ++i) {
    const size_t n = train[i].prompt.size() + train[i].answer.size() + 1;
    FP8RL_REQUIRE(static_cast<int64_t>(n) <= model.config().max_seq_len,
                "training example {} needs {} tokens (prompt, answer, end), more than the model's max_seq_len {}", i, n,
                model.config().max_seq_len);
  }
  encode_validation_prompts(*task, tok, config.val_max_examples, config.max_new_tokens, model.config().max_seq_len);
  const dist::Communicator& comm = dist::world();
  const std::unique_ptr<RewardFunction> reward = make_reward_function(config.reward, config.sandbox, *task, comm.rank());
  // Under several ranks each keeps the moments of its shard only (rl/data_parallel.h).
  AdamW optimizer(model.layout(), config.adam, dist::optimizer_range(model.num_params(), comm.rank(), comm.size()),
                  config.offload_moments ? spill_directory_for(config.log_dir) : fs::path());
  optimizer.freeze([&](const ParamInfo& t) { return !model.trains(t); });

  // Under MPI every rank runs its share of each step's micro-batches (sft_step); rank 0 alone
  // writes the run directory and prints.
  const bool root = comm.is_root();
  const fs::path run_dir = config.log_dir;
  std::optional<MetricsLog> metrics;
  std::optional<TfEventsWriter> tensorboard;
  std::optional<RunDirectoryLock> lock;  // one job at a time in a run directory
  if (root) lock.emplace(run_dir);
  // Validation before the run's files are written: a reward plug-in that does not answer leaves
  // nothing behind.
  SftJobResult result;
  result.val_accuracy_before =
      greedy_validation_accuracy(model, *task, *reward, tok, config.val_max_examples, config.max_new_tokens);
  if (root) {
    remove_stale_temporaries(run_dir, "checkpoint");
    write_file_atomic(run_dir / "config.yaml", effective_yaml);
    metrics.emplace(MetricsLog::create(run_dir / "sft_metrics.jsonl"));
    if (config.tensorboard_enabled) tensorboard.emplace(run_dir);
  }
  if (root && config.environment.enabled())
    fmt::print("sft: note: task.environment is for `fp8rl train`; SFT's validation answers in one turn\n");
  if (root)
    fmt::print("sft: {} parameters, precision {}, validation accuracy before: {:.3f} ({} examples){}\n",
               model.num_params(), precision_name(config.precision), result.val_accuracy_before,
               std::min<int64_t>(config.val_max_examples, static_cast<int64_t>(task->validation().size())),
               comm.size() > 1 ? fmt::format("; {} processes x {} threads", comm.size(), kernel_thread_pool().size()) : "");

  LrSchedule schedule = config.schedule;
  if (schedule.total_steps == 0) schedule.total_steps = config.sft_max_num_steps;
  RandomStream order(static_cast<uint64_t>(config.sft_seed), /*stream=*/0);
  const int64_t global = config.train_global_batch_size, micro = std::min(config.train_micro_batch_size, global);
  Timer total;
  int64_t skipped = 0, skipped_in_a_row = 0;
  ProgressLine progress("sft", 0, config.sft_max_num_steps, root && stdout_is_terminal());
  std::string last_validation;  // the progress line's "val acc X @STEP"
  for (int64_t step = 0; step < config.sft_max_num_steps; ++step) {
    Timer t;
    std::vector<TokenBatch> micro_batches;
    for (int64_t m0 = 0; m0 < global; m0 += micro) {
      std::vector<const SftExample*> picks;
      for (int64_t i = m0; i < std::min(global, m0 + micro); ++i)
        picks.push_back(&train[order.next_below(static_cast<uint32_t>(train.size()))]);
      micro_batches.push_back(make_sft_batch(picks, tok.eos(), tok.pad()));
    }
    const double lr = schedule.lr_at(config.adam.lr, step);
    const SftStepResult r = sft_step(model, optimizer, micro_batches, lr, comm, config.aux_loss_coef);
    skipped += r.skipped;
    skipped_in_a_row = r.skipped ? skipped_in_a_row + 1 : 0;
    const double seconds = t.seconds();
    nlohmann::ordered_json line = {{"step", step + 1}, {"loss", r.loss},  {"grad_norm", r.grad_norm},
                                   {"lr", lr},         {"tokens", r.tokens}, {"tokens_per_s", r.tokens / seconds},
                                   {"skipped", r.skipped}};
    if (model.config().is_moe()) line["moe_aux_loss"] = r.moe_aux_loss;
    const bool last = step + 1 == config.sft_max_num_steps;
    if (config.sft_val_period > 0 && (step + 1) % config.sft_val_period == 0 && !last) {
      line["val_accuracy"] = greedy_validation_accuracy(model, *task, *reward, tok, config.val_max_examples, config.max_new_tokens);
    }
    if (metrics) metrics->append(line.dump());
    if (tensorboard) {
      tensorboard->add_scalars(step + 1, unix_time_seconds(), metrics_line_scalars(line, "sft/"));
      tensorboard->flush();
    }
    if (r.skipped && root) {
      progress.end_line();
      fmt::print(stderr, "sft: warning: step {} skipped (non-finite loss or gradient)\n", step + 1);
    }
    FP8RL_REQUIRE(config.sft_max_consecutive_skipped_steps == 0 ||
                      skipped_in_a_row < config.sft_max_consecutive_skipped_steps,
                  "sft: step {}: {} optimizer steps in a row had a non-finite loss or gradient "
                  "(sft.max_consecutive_skipped_steps): the run has diverged and stops without a checkpoint; lower "
                  "policy.optimizer.lr or policy.max_grad_norm",
                  step + 1, skipped_in_a_row);
    if (line.contains("val_accuracy"))
      last_validation = fmt::format("  val acc {:.3f} @{}", line["val_accuracy"].get<double>(), step + 1);
    if (progress.enabled()) {
      progress.update(step + 1, fmt::format("loss {:.4f}{}  lr {:.2e}  {:.0f} tok/s", r.loss, last_validation, lr,
                                            r.tokens / seconds));
    } else if (root && ((step + 1) % 10 == 0 || step == 0 || last || line.contains("val_accuracy"))) {
      fmt::print("sft step {:>5}/{}  loss {:.4f}  lr {:.2e}  grad {:.3f}  {:.0f} tok/s{}\n", step + 1,
                 config.sft_max_num_steps, r.loss, lr, r.grad_norm, r.tokens / seconds,
                 line.contains("val_accuracy") ? fmt::format("  val acc {:.3f}", line["val_accuracy"].get<double>()) : "");
      std::fflush(stdout);
    }
  }
  progress.end_line();
  result.val_accuracy_after = greedy_validation_accuracy(model, *task, *reward, tok, config.val_max_examples, config.max_new_tokens);
  result.checkpoint = run_dir / "checkpoint";
  dist::save_checkpoint(comm, result.checkpoint, model, optimizer, {{"sft_steps", config.sft_max_num_steps}},
                        config.model_dir().value_or(""));
  if (root) export_job_model(config, model);
  comm.barrier();
  if (root)
    fmt::print("sft: done in {:.1f} s ({} skipped steps); validation accuracy {:.3f} -> {:.3f}; checkpoint {}\n",
             total.seconds(), skipped, result.val_accuracy_before, result.val_accuracy_after, result.checkpoint.string());
  return result;
}

double run_eval_job(const RunConfig& config) {
  FP8RL_REQUIRE(config.model_dir().has_value(), "eval needs model.name=DIR or model.checkpoint=DIR");
  const std::unique_ptr<Task> task = make_task(config);
  const std::unique_ptr<RewardFunction> reward = make_reward_function(config.reward, config.sandbox, *task);
  // Forward only: a frozen model (no FP32 masters, no gradients), the same log-probs.
  Transformer model = load_frozen_model(*config.model_dir(), config.trainer_policy());
  const std::unique_ptr<Tokenizer> tok = load_job_tokenizer(config, model.config());
  return greedy_validation_accuracy(model, *task, *reward, *tok, config.val_max_examples, config.max_new_tokens);
}

}  // namespace fp8rl
