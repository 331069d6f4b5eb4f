#include "jobs/grpo.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "core/memory.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "io/metrics_log.h"
#include "io/run_lock.h"
#include "io/spill_file.h"
#include "io/tfevents.h"
#include "model/checkpoint.h"
#include "rl/advantages.h"
#include "rl/data_parallel.h"
#include "jobs/evaluate.h"
#include "rl/grpo_loss.h"
#include "jobs/model_source.h"
#include "rl/multi_turn.h"
#include "rl/refit.h"
#include "rl/reward_metrics.h"
#include "rl/rollout.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// Random streams of grpo.seed (the generator's sampling uses the sequence index as its stream).
constexpr uint64_t kPromptStream = 1ull << 40;

// policy.release_memory_between_phases: auto frees each phase's buffers from this many parameters
// on (gigabytes of buffers at such sizes; below it, touching the pages again costs more than the
// memory is worth).
constexpr int64_t kReleaseMemoryParams = 100'000'000;

// MoE models: the trainer's routing in its last forward (rollouts [begin, end) as rollout_batch
// lays them out, T positions each) against the generator's, into `sums`: one decision per
// (position read, MoE layer), mismatched when its k experts differ as a set. (The same experts in
// another slot order, which near-ties of the top probabilities give, are the same decision: with
// k = 2 they combine to the same bits, the two-term sum being commutative.)
void count_routing_mismatch(const Transformer& model, const std::vector<Rollout>& r, size_t begin, size_t end,
                            int64_t T, GrpoMetricSums& sums) {
  const std::vector<std::vector<int32_t>>& trainer = model.last_routing();
  if (trainer.empty()) return;
  const int64_t layers = static_cast<int64_t>(trainer.size()), k = model.config().experts_per_token;
  for (size_t i = begin; i < end; ++i) {
    const int64_t read = static_cast<int64_t>(r[i].prompt.size() + r[i].response.size()) - 1;
    FP8RL_CHECK(static_cast<int64_t>(r[i].routing.size()) == read * layers * k,
                "routing of rollout {}: {} entries from the generator, expected {} positions x {} MoE layers x {}", i,
                r[i].routing.size(), read, layers, k);
    std::vector<int32_t> ours(static_cast<size_t>(k)), theirs(static_cast<size_t>(k));
    for (int64_t pos = 0; pos < read; ++pos) {
      const int64_t row = static_cast<int64_t>(i - begin) * T + pos;
      for (int64_t l = 0; l < layers; ++l) {
        for (int64_t j = 0; j < k; ++j) {
          ours[static_cast<size_t>(j)] = trainer[static_cast<size_t>(l)][static_cast<size_t>(row * k + j)];
          theirs[static_cast<size_t>(j)] = r[i].routing[static_cast<size_t>((pos * layers + l) * k + j)];
        }
        std::sort(ours.begin(), ours.end());
        std::sort(theirs.begin(), theirs.end());
        ++sums.routing_decisions;
        sums.routing_mismatched += ours != theirs;
      }
    }
  }
}

// Log-probs of the response tokens of rollouts [begin, end) under `model`, appended to `out`
// per rollout (out[i] for rollout i). Through the prefix layout: a prompt's rows are computed
// once for its G samples and padding costs nothing, with the padded forward's bits.
void response_logprobs(Transformer& model, std::vector<Rollout>& r, size_t begin, size_t end, int32_t pad,
                       int64_t replay_width, std::vector<float> Rollout::*field) {
  const TokenBatch b = rollout_batch(r, begin, end, pad, replay_width);
  std::vector<float> lp(static_cast<size_t>(b.B * b.T));
  model.prefix_logprobs(b, lp.data());
  for (size_t i = begin; i < end; ++i) {
    const size_t start = (i - begin) * static_cast<size_t>(b.T) + r[i].prompt.size() - 1;
    (r[i].*field).assign(lp.begin() + static_cast<std::ptrdiff_t>(start),
                         lp.begin() + static_cast<std::ptrdiff_t>(start + r[i].response.size()));
  }
}

// Per layer [q, k, v], followed by [q_heads], [k_heads], [v_heads] with per-head scales.
nlohmann::json scales_to_json(const std::vector<QkvScales>& s) {
  nlohmann::json j = nlohmann::json::array();
  for (const QkvScales& x : s) {
    nlohmann::json layer = {x.q, x.k, x.v};
    if (x.per_head()) layer.insert(layer.end(), {x.q_heads, x.k_heads, x.v_heads});
    j.push_back(std::move(layer));
  }
  return j;
}
// The KV scales of trainer state `state` (read from checkpoint `dir`), checked.
std::vector<QkvScales> scales_from_json(const nlohmann::json& state, const fs::path& dir, int64_t n_layers) {
  const nlohmann::json j = state.value("kv_scales", nlohmann::json());
  const auto scale = [](const nlohmann::json& x) { return x.is_number() && x.get<double>() > 0 && std::isfinite(x.get<double>()); };
  const auto scales = [&](const nlohmann::json& v) { return v.is_array() && std::all_of(v.begin(), v.end(), scale); };
  bool ok = j.is_array() && static_cast<int64_t>(j.size()) == n_layers;
  for (size_t l = 0; ok && l < j.size(); ++l) {  // [q, k, v] or [q, k, v, [q heads], [k heads], [v heads]]
    const nlohmann::json& x = j[l];
    ok = x.is_array() && (x.size() == 3 || x.size() == 6);
    for (size_t i = 0; ok && i < x.size(); ++i) ok = i < 3 ? scale(x[i]) : scales(x[i]);
  }
  FP8RL_REQUIRE(ok,
                "'{}': key 'kv_scales' must hold {} layers of positive finite [q, k, v] scales (with per-head lists), "
                "got {}",
                (dir / "trainer_state.json").string(), n_layers, j.dump().substr(0, 200));
  std::vector<QkvScales> s;
  for (const auto& x : j) {
    QkvScales l{x[0].get<float>(), x[1].get<float>(), x[2].get<float>(), {}, {}, {}};
    if (x.size() == 6) {
      l.q_heads = x[3].get<std::vector<float>>();
      l.k_heads = x[4].get<std::vector<float>>();
      l.v_heads = x[5].get<std::vector<float>>();
    }
    s.push_back(std::move(l));
  }
  return s;
}

// The wall time of each phase of a step (metrics.jsonl's `timing`).
struct StepTimings {
  double generation = 0, reward = 0, logprobs = 0, training = 0, refit = 0, kv_calibration = 0, total = 0;
  double communication = 0;  // within training, with several processes
  double optimizer = 0;      // within training: the AdamW steps and the updated weights' requantization
};

// A step's rollouts, scored, with the generator's figures.
struct StepRollouts {
  std::vector<Rollout> rollouts;  // prompt p's sample g at p * G + g
  int64_t tokens = 0, longest = 0;  // response tokens in all, and in the longest response
  int64_t kv_waited = 0;  // rollouts that waited for KV cache pages
  RewardMetrics reward_metrics;  // a plug-in's named figures, averaged, and its timeouts
  int64_t env_turns = 0, observation_tokens = 0;  // multi-turn: in all rollouts
  // This rank's rollouts [mine_begin, mine_end) (the ones it generated and scores), and the
  // rewards their environment gave (multi-turn; nullopt: task.reward scores it).
  int64_t mine_begin = 0, mine_end = 0;
  std::vector<std::optional<double>> given_rewards;
};

// What the optimizer steps of one GRPO step leave.
struct TrainingResult {
  GrpoMetricSums sums;
  double grad_norm = 0, lr = 0;  // of the last optimizer step
  int64_t skipped = 0;  // optimizer steps skipped for a non-finite loss or gradient
  double optimizer_seconds = 0;  // the AdamW steps and the requantization of the updated weights
};

// The micro-batches [m0, m1) of the rollouts, per optimizer step.
using MicroBatches = std::vector<std::pair<size_t, size_t>>;

// One GRPO job: inputs, models, generator, run directory. The constructor loads and checks
// everything and writes nothing; each phase of a step is one method, in the order the step runs
// them (run_grpo_job).
class GrpoJob {
 public:
  GrpoJob(const RunConfig& config, bool resume);

  // Rank 0: the lock (before start(), so that no other job runs there meanwhile).
  void lock_run_directory();
  // Rank 0: config.yaml, metrics.jsonl (cut back to the checkpoint on a resume), TensorBoard's
  // event file. After start(): a run that fails to start (a reward plug-in that does not answer
  // the first validation, say) leaves no run behind that --resume would have to continue.
  void open_run_directory(const std::string& effective_yaml);
  // The first refit and KV calibration; returns the validation accuracy before training.
  double start();
  int64_t start_step() const { return start_step_; }

  StepRollouts generate(int64_t step);                  // 1. rollouts
  void score(int64_t step, StepRollouts& s);            // 2. rewards, 3. advantages
  void old_logprobs(std::vector<Rollout>& r);           // 4. prev and reference log-probs
  TrainingResult train(std::vector<Rollout>& r, double* communication_seconds);  // 5. optimizer steps
  void refit() { refit_generator_weights(policy_, generator_); }  // 6. the trainer's bytes into the generator
  void recalibrate_kv(int64_t step, const std::vector<Rollout>& r);  // 7. FP8 KV cache only
  // 8. metrics.jsonl's line of the step (validation at its period and at the end).
  nlohmann::ordered_json metrics_line(int64_t step, const StepRollouts& s, const TrainingResult& t,
                                      const GrpoMetrics& m);
  void write_metrics(int64_t step, const nlohmann::ordered_json& line);
  void checkpoint(int64_t step);  // 9.
  // After a step with skipped optimizer steps: warns, and stops a run that has diverged.
  void check_divergence(int64_t step, int64_t skipped) const;
  void export_model() { export_job_model(config_, policy_); }
  double validate();

 private:
  std::vector<const Example*> draw_prompts(int64_t step) const;
  std::vector<std::vector<int32_t>> step_prompts(int64_t step) const;  // the framed ids of each pick
  std::vector<QkvScales> kv_scales_of(const std::vector<Transformer::QkvAmax>& amax) const {
    return kv_scales_from_amax(amax, kv_granularity_, static_cast<float>(config_.kv_scale_margin));
  }
  void use_kv_scales(const std::vector<QkvScales>& scales);
  std::vector<MicroBatches> optimizer_steps() const;
  void offload_reference();
  // The text a reward scores: the response up to eos, or a multi-turn sample's whole transcript.
  std::string response_text(const std::vector<int32_t>& response) const {
    return environment_ ? tokenizer_->decode_transcript(response) : tokenizer_->decode_response(response);
  }

  const RunConfig& config_;
  const dist::Communicator& comm_;
  const bool root_;
  const bool resume_;
  const int64_t P_, G_, rollouts_, global_, micro_;
  const fs::path run_dir_, ckpt_dir_;
  std::unique_ptr<Task> task_;
  std::unique_ptr<RewardFunction> reward_;  // this rank's: a plug-in's workers, or the task's verifier
  std::unique_ptr<Environment> environment_;  // this rank's multi-turn environment (task.environment), if any
  Transformer policy_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<std::vector<int32_t>> train_ids_, val_ids_;
  std::optional<Transformer> reference_;  // the KL term's: the initial weights, frozen
  std::optional<SpillFile> reference_file_;  // its weights between log-prob phases (offload_reference)
  bool reference_stays_ = false;             // its spill file could not be written
  AdamW optimizer_;
  LrSchedule schedule_;
  GenerationEngine generator_;
  bool release_memory_ = false;  // policy.release_memory_between_phases
  int64_t replay_width_ = 0;     // policy.router_replay: MoE layers x k (0: off)
  bool fp8_kv_ = false;
  KvScaleGranularity kv_granularity_;
  std::vector<QkvScales> kv_scales_;
  GenerateOptions gen_opts_, val_opts_;
  int64_t start_step_ = 0;
  int64_t skipped_total_ = 0, skipped_in_a_row_ = 0;  // optimizer steps (grpo.max_consecutive_skipped_steps)
  std::optional<RunDirectoryLock> lock_;
  std::optional<MetricsLog> metrics_;
  std::optional<TfEventsWriter> tensorboard_;  // a new event file per invocation (resumed runs too)
};

// The recipe's GRPO keys, checked before anything is loaded.
const RunConfig& checked(const RunConfig& config) {
  config.validate_grpo();
  const int64_t rollouts = config.num_prompts_per_step * config.num_generations_per_prompt;
  FP8RL_REQUIRE(rollouts % config.train_global_batch_size == 0,
                "policy.train_global_batch_size ({}) must divide grpo.num_prompts_per_step * num_generations_per_prompt "
                "({})",
                config.train_global_batch_size, rollouts);
  return config;
}

// Whether the job continues from a checkpoint: with --resume and a checkpoint there. A run
// stopped before its first checkpoint (or never started) has nothing to continue but the start;
// without --resume, a directory that holds a run is refused.
bool resumes_from_checkpoint(const RunConfig& config, bool resume, bool root) {
  const fs::path run_dir = config.log_dir;
  if (resume && !fs::exists(run_dir / "checkpoint" / "trainer_state.json")) {
    if (root) fmt::print("grpo: --resume: '{}' holds no checkpoint yet; the run starts from step 0\n", run_dir.string());
    return false;
  }
  FP8RL_REQUIRE(resume || !fs::exists(run_dir / "metrics.jsonl"),
                "run directory '{}' already holds a run: pass --resume to continue it (from its last checkpoint, or "
                "from the start if it has none yet), or choose another logger.log_dir",
                run_dir.string());
  return resume;
}

GrpoJob::GrpoJob(const RunConfig& config, bool resume)
    : config_(checked(config)),
      // The world of this run (docs/distributed.md): each rank generates its share of the prompts
      // and trains its share of the micro-batches; rank 0 alone writes the run directory.
      comm_(dist::world()),
      root_(comm_.is_root()),
      resume_(resumes_from_checkpoint(config, resume, root_)),
      P_(config.num_prompts_per_step),
      G_(config.num_generations_per_prompt),
      rollouts_(P_ * G_),
      global_(config.train_global_batch_size),
      micro_(std::min(config.train_micro_batch_size, global_)),
      run_dir_(config.log_dir),
      ckpt_dir_(run_dir_ / "checkpoint"),
      task_(make_task(config)),
      reward_(make_reward_function(config.reward, config.sandbox, *task_, comm_.rank())),
      environment_(config.environment.enabled() ? make_environment(config.environment, config.sandbox, comm_.rank()) : nullptr),
      policy_(load_job_model(config)),
      tokenizer_(load_job_tokenizer(config, policy_.config())),
      // Under several ranks each keeps the moments of its shard only (rl/data_parallel.h).
      optimizer_(policy_.layout(), config.adam, dist::optimizer_range(policy_.num_params(), comm_.rank(), comm_.size()),
                 config.offload_moments ? spill_directory_for(run_dir_) : fs::path()),
      schedule_(config.schedule),
      generator_(policy_.config(), config.generator_policy(), config.engine_options()),
      kv_granularity_(config.kv_scale_granularity) {
  // Every prompt framed and encoded once (and checked to fit the model).
  train_ids_ = encode_prompts(*tokenizer_, task_->train(), config.max_new_tokens, policy_.config().max_seq_len, "training");
  val_ids_ = encode_prompts(*tokenizer_, task_->validation(), config.max_new_tokens, policy_.config().max_seq_len,
                            "validation");
  // The reference: the low-precision copies the policy's forward reads (no masters, no
  // gradients), taken before a resume loads the checkpoint.
  if (config.loss.reference_policy_kl_penalty > 0) reference_.emplace(policy_.frozen_copy());
  // (load_job_model refused the MoE options for a dense model.)
  if (config.router_replay) replay_width_ = policy_.config().num_moe_layers() * policy_.config().experts_per_token;
  optimizer_.freeze([&](const ParamInfo& t) { return !policy_.trains(t); });
  if (schedule_.total_steps == 0) schedule_.total_steps = config.grpo_max_num_steps * (rollouts_ / global_);
  // Each phase's buffers (the KV cache's pages and the generator's packed weights, the log-prob
  // forwards' scratch and the reference's weights, the training activations and gradients) freed
  // when the phase ends, so that the peak is the largest phase's, not their sum.
  release_memory_ = config.release_memory_between_phases == ReleaseMemory::kAlways ||
                    (config.release_memory_between_phases == ReleaseMemory::kAuto &&
                     policy_.num_params() >= kReleaseMemoryParams);
  fp8_kv_ = generator_.kv_cache().dtype() == DType::kE4M3;
  if (resume_) {
    load_model_weights(ckpt_dir_, policy_);
    load_optimizer_state(ckpt_dir_, optimizer_);
    const nlohmann::json state = load_trainer_state(ckpt_dir_);
    start_step_ = trainer_state_step(state, ckpt_dir_, "step", config.grpo_max_num_steps);
    // Each GRPO step takes rollouts / global optimizer steps, less the skipped ones.
    FP8RL_REQUIRE(optimizer_.steps_taken() <= start_step_ * (rollouts_ / global_),
                  "checkpoint '{}': the optimizer state has taken {} steps, more than {} GRPO steps of {} can "
                  "(optimizer.safetensors and trainer_state.json are from different runs?)",
                  ckpt_dir_.string(), optimizer_.steps_taken(), start_step_, rollouts_ / global_);
    if (fp8_kv_) kv_scales_ = scales_from_json(state, ckpt_dir_, policy_.config().n_layers);
  }
  gen_opts_.max_new_tokens = config.max_new_tokens;
  gen_opts_.sampling = {static_cast<float>(config.temperature), config.top_k, static_cast<float>(config.top_p),
                        static_cast<uint64_t>(config.grpo_seed)};
  gen_opts_.eos = tokenizer_->eos();
  gen_opts_.share_prefix = config.share_prefix;
  val_opts_ = gen_opts_;
  val_opts_.sampling.temperature = 0.0f;
}

void GrpoJob::lock_run_directory() {
  comm_.barrier();  // every rank has checked the directory (and read the checkpoint) before rank 0 writes
  // One job at a time in a run directory (a second train, or a --resume of a running run, stops here).
  if (root_) lock_.emplace(run_dir_);
}

void GrpoJob::open_run_directory(const std::string& effective_yaml) {
  if (!root_) return;
  fs::create_directories(run_dir_);
  remove_stale_temporaries(run_dir_, "checkpoint");  // leftovers of a crash during a checkpoint write
  write_file_atomic(run_dir_ / "config.yaml", effective_yaml);
  if (resume_) {
    int64_t kept = 0;
    metrics_.emplace(MetricsLog::resume(run_dir_ / "metrics.jsonl", start_step_, &kept));
    if (kept < start_step_)
      fmt::print(stderr, "grpo: warning: '{}' held {} step lines for a checkpoint at step {}: steps {}-{} have none\n",
                 (run_dir_ / "metrics.jsonl").string(), kept, start_step_, kept + 1, start_step_);
    truncate_event_files(run_dir_, start_step_);  // TensorBoard's copy of the metrics, likewise
  } else {
    metrics_.emplace(MetricsLog::create(run_dir_ / "metrics.jsonl"));
  }
  if (config_.tensorboard_enabled) tensorboard_.emplace(run_dir_);
}

double GrpoJob::start() {
  refit();
  if (fp8_kv_) {
    // Before the first step: calibrate on the first step's prompts.
    if (kv_scales_.empty()) kv_scales_ = kv_scales_of(calibrate_qkv_amax(policy_, step_prompts(start_step_), P_, tokenizer_->pad()));
    use_kv_scales(kv_scales_);
  }
  const double accuracy = validate();
  if (root_) {
    fmt::print("grpo: {} parameters; trainer {} / generator {} linears, KV cache {} ({} tokens in {} MiB); "
               "{} prompts x {} samples per step{}; validation accuracy at start {:.3f}\n",
               policy_.num_params(), precision_name(config_.precision), precision_name(config_.generation_precision),
               kv_dtype_name(config_.kv_cache_dtype),
               generator_.kv_cache().capacity_tokens(), generator_.kv_cache().storage_bytes() >> 20, P_, G_,
               comm_.size() > 1 ? fmt::format(" on {} processes x {} threads", comm_.size(), kernel_thread_pool().size()) : "",
               accuracy);
    // A budget that cannot hold a step's rollouts decodes them in waves: say so once, with the
    // budget that would hold their new tokens (their prompts' pages come on top).
    const int64_t ranks = comm_.size(), rollouts = (P_ + ranks - 1) / ranks * G_;
    const int64_t tokens = rollouts * kv_pages_for(gen_opts_.max_new_tokens) * kPageTokens;
    if (generator_.kv_cache().capacity_tokens() < tokens)
      fmt::print(
          "grpo: note: the KV cache holds {} tokens, fewer than the {} new tokens of a step's {} rollouts{}: they "
          "decode in waves (kv_waited in metrics.jsonl); generation.kv_cache_bytes >= {} lets them run together\n",
          generator_.kv_cache().capacity_tokens(), tokens, rollouts, comm_.size() > 1 ? " per process" : "",
          tokens * generator_.kv_cache().bytes_per_token());
    std::fflush(stdout);
  }
  return accuracy;
}

// Each rank answers its share of the validation prompts; the rewards are summed in example order.
double GrpoJob::validate() {
  const auto& val = task_->validation();
  const int64_t n = std::min<int64_t>(config_.val_max_examples, static_cast<int64_t>(val.size()));
  const dist::Share share = dist::share_of(n, comm_.rank(), comm_.size());
  const std::vector<std::vector<int32_t>> prompts(val_ids_.begin() + share.begin, val_ids_.begin() + share.end);
  std::vector<double> mine;
  if (!prompts.empty()) {
    std::vector<const Example*> examples;
    for (int64_t i = share.begin; i < share.end; ++i) examples.push_back(&val[static_cast<size_t>(i)]);
    std::optional<EnvironmentTurns> turns;
    GenerateOptions opts = val_opts_;
    if (environment_) {
      turns.emplace(*environment_, config_.environment, *tokenizer_, examples, 1, "val", share.begin);
      opts.turns = &*turns;
    }
    const auto out = generator_.generate(prompts, 1, opts);
    std::vector<RewardRequest> requests;
    std::vector<double> given(out.size(), std::nan(""));  // rewards an environment gave
    for (size_t k = 0; k < out.size(); ++k) {
      if (turns && turns->reward(static_cast<int64_t>(k))) {
        given[k] = *turns->reward(static_cast<int64_t>(k));
        continue;
      }
      requests.push_back({fmt::format("val/{}", share.begin + static_cast<int64_t>(k)), examples[k],
                          response_text(out[k].tokens)});
    }
    const std::vector<RewardResult> scored = reward_->score(requests);
    for (size_t k = 0, n = 0; k < out.size(); ++k) mine.push_back(std::isnan(given[k]) ? scored[n++].reward : given[k]);
  }
  double total = 0;
  for (double reward : dist::allgather_values(comm_, mine)) total += reward;
  return total / static_cast<double>(n);
}

std::vector<const Example*> GrpoJob::draw_prompts(int64_t step) const {
  std::vector<const Example*> picks;
  const auto& train = task_->train();
  for (int64_t i = 0; i < P_; ++i)
    picks.push_back(&train[random_u32(static_cast<uint64_t>(config_.grpo_seed), kPromptStream,
                                      static_cast<uint64_t>(step * P_ + i)) % train.size()]);
  return picks;
}

std::vector<std::vector<int32_t>> GrpoJob::step_prompts(int64_t step) const {
  std::vector<std::vector<int32_t>> prompts;
  for (const Example* e : draw_prompts(step)) prompts.push_back(train_ids_[static_cast<size_t>(e - task_->train().data())]);
  return prompts;
}

// The generator's scales, and with policy.fp8_kv_attention the trainer's attention's too.
void GrpoJob::use_kv_scales(const std::vector<QkvScales>& scales) {
  generator_.set_kv_scales(scales);
  if (config_.fp8_kv_attention)
    policy_.set_attention_e4m3_scales(attention_e4m3_scales(scales, policy_.config().n_kv_heads, config_.fp8_attention));
}

StepRollouts GrpoJob::generate(int64_t step) {
  const std::vector<const Example*> picks = draw_prompts(step);
  const std::vector<std::vector<int32_t>> prompts = step_prompts(step);
  // This rank's share of the prompts (whole groups); sequence (p, g) draws from stream
  // step * rollouts + p * G + g whichever rank generates it.
  const dist::Share share = dist::share_of(P_, comm_.rank(), comm_.size());
  std::vector<GeneratedSequence> mine;
  StepRollouts out;
  std::optional<EnvironmentTurns> turns;  // multi-turn: this rank's samples' turns
  if (share.end > share.begin) {
    gen_opts_.first_sequence_index = static_cast<uint64_t>(step * rollouts_ + share.begin * G_);
    gen_opts_.turns = nullptr;
    if (environment_) {
      std::vector<const Example*> examples;
      for (int64_t i = share.begin * G_; i < share.end * G_; ++i) examples.push_back(picks[static_cast<size_t>(i / G_)]);
      turns.emplace(*environment_, config_.environment, *tokenizer_, examples, G_, fmt::format("step{}", step + 1),
                    share.begin);
      gen_opts_.turns = &*turns;
    }
    mine = generator_.generate({prompts.begin() + share.begin, prompts.begin() + share.end}, G_, gen_opts_);
    gen_opts_.turns = nullptr;
    for (GeneratedSequence& s : mine) s.prompt_index += share.begin;
    out.kv_waited = generator_.last_stats().kv_waited;
  }
  if (release_memory_) generator_.release_memory();  // packed again by the refit
  const std::vector<GeneratedSequence> seqs = dist::allgather_sequences(comm_, std::move(mine));
  if (comm_.size() > 1) {  // the rollouts of every rank that waited
    const std::vector<int64_t> waited = dist::allgather_values(comm_, std::vector<int64_t>{out.kv_waited});
    out.kv_waited = 0;
    for (int64_t w : waited) out.kv_waited += w;
  }
  std::vector<Rollout>& r = out.rollouts;
  r.resize(static_cast<size_t>(rollouts_));
  for (size_t i = 0; i < r.size(); ++i) {
    r[i].example = picks[i / static_cast<size_t>(G_)];
    r[i].prompt = prompts[i / static_cast<size_t>(G_)];
    r[i].response = seqs[i].tokens;
    r[i].observation = seqs[i].observation;
    r[i].gen = seqs[i].logprobs;
    r[i].routing = seqs[i].routing;
    out.env_turns += seqs[i].turns;
    out.observation_tokens += static_cast<int64_t>(r[i].response.size()) - model_tokens(r[i]);
    out.tokens += static_cast<int64_t>(r[i].response.size());
    out.longest = std::max<int64_t>(out.longest, static_cast<int64_t>(r[i].response.size()));
  }
  out.mine_begin = share.begin * G_;
  out.mine_end = share.end * G_;
  for (int64_t i = out.mine_begin; i < out.mine_end; ++i)
    out.given_rewards.push_back(turns ? turns->reward(i - out.mine_begin) : std::nullopt);
  return out;
}

// Each rank scores the rollouts it generated (with its own plug-in workers), then every rank has
// all the rewards, in rollout order. A multi-turn sample whose environment gave its reward is not
// scored again.
void GrpoJob::score(int64_t step, StepRollouts& out) {
  std::vector<Rollout>& r = out.rollouts;
  std::vector<RewardRequest> requests;
  const auto given = [&](int64_t i) { return out.given_rewards[static_cast<size_t>(i - out.mine_begin)]; };
  for (int64_t i = out.mine_begin; i < out.mine_end; ++i)
    if (!given(i))
      requests.push_back({fmt::format("step{}/p{}/g{}", step + 1, i / G_, i % G_), r[static_cast<size_t>(i)].example,
                          response_text(r[static_cast<size_t>(i)].response)});
  const std::vector<RewardResult> scored = reward_->score(requests);
  std::vector<double> mine_rewards;
  for (int64_t i = out.mine_begin, n = 0; i < out.mine_end; ++i)
    mine_rewards.push_back(given(i) ? *given(i) : scored[static_cast<size_t>(n++)].reward);
  const std::vector<double> all_rewards = dist::allgather_values(comm_, mine_rewards);
  out.reward_metrics = gather_reward_metrics(comm_, scored);
  // Group advantages.
  std::vector<float> rewards(r.size());
  for (size_t i = 0; i < r.size(); ++i) {
    r[i].reward = static_cast<float>(all_rewards[i]);
    rewards[i] = r[i].reward;
  }
  const std::vector<float> adv = compute_advantages(rewards, G_, config_.advantages);
  for (size_t i = 0; i < r.size(); ++i) r[i].advantage = adv[i];
}

std::vector<MicroBatches> GrpoJob::optimizer_steps() const {
  std::vector<MicroBatches> steps;
  for (size_t g0 = 0; g0 < static_cast<size_t>(rollouts_); g0 += static_cast<size_t>(global_)) {
    steps.emplace_back();
    for (size_t m0 = g0; m0 < g0 + static_cast<size_t>(global_); m0 += static_cast<size_t>(micro_))
      steps.back().emplace_back(m0, std::min(g0 + static_cast<size_t>(global_), m0 + static_cast<size_t>(micro_)));
  }
  return steps;
}

// With a single optimizer step per GRPO step, the training forward runs the same weights on the
// same micro-batches, so its log-probs are prev bit for bit and the separate pass is skipped.
// Micro-batch k of an optimizer step runs on rank k % N, which alone needs its log-probs.
void GrpoJob::old_logprobs(std::vector<Rollout>& r) {
  const bool prev_from_training = rollouts_ == global_;
  if (reference_ && reference_->weights_offloaded()) reference_->restore_weights(*reference_file_);
  for (const MicroBatches& micro_batches : optimizer_steps())
    for (size_t k = 0; k < micro_batches.size(); ++k) {
      if (!dist::runs_micro_batch(static_cast<int64_t>(k), comm_.rank(), comm_.size())) continue;
      const auto [m0, m1] = micro_batches[k];
      if (!prev_from_training) response_logprobs(policy_, r, m0, m1, tokenizer_->pad(), replay_width_, &Rollout::prev);
      if (reference_) response_logprobs(*reference_, r, m0, m1, tokenizer_->pad(), replay_width_, &Rollout::ref);
    }
  if (release_memory_) {
    policy_.release_activations();
    if (reference_) {
      reference_->release_activations();
      offload_reference();
    }
  }
}

// Until the next step's log-prob phase the reference policy's weights leave memory for a spill
// file in the run directory (where this rank's node has none, its nearest existing parent): written
// once, read back each step. A file that cannot be written leaves them in memory, with a warning.
void GrpoJob::offload_reference() {
  if (reference_stays_) return;
  try {
    if (!reference_file_) reference_file_.emplace(spill_directory_for(run_dir_));
    reference_->offload_weights(*reference_file_);
  } catch (const Error& e) {
    fmt::print(stderr, "grpo: warning: the reference policy's weights stay in memory: {}\n", e.what());
    reference_file_.reset();
    reference_stays_ = true;
  }
}

TrainingResult GrpoJob::train(std::vector<Rollout>& r, double* communication_seconds) {
  const bool prev_from_training = rollouts_ == global_;
  const int32_t pad = tokenizer_->pad();
  TrainingResult out;
  const std::vector<MicroBatches> steps = optimizer_steps();
  for (const MicroBatches& micro_batches : steps) {
    // The first optimizer step runs on the weights that generated the rollouts: its forwards'
    // routing is the one to compare with the generator's (MoE models).
    const bool generation_weights = &micro_batches == &steps.front();
    const size_t g0 = micro_batches.front().first, g1 = micro_batches.back().second;
    int64_t global_tokens = 0;
    for (size_t i = g0; i < g1; ++i) global_tokens += model_tokens(r[i]);
    // One micro-batch: forward, loss, backward; its metric sums go to every rank.
    const auto run = [&](int64_t k, EmbeddingRowGrads* embedding_rows) {
      const auto [m0, m1] = micro_batches[static_cast<size_t>(k)];
      const TokenBatch b = rollout_batch(r, m0, m1, pad, replay_width_);
      std::vector<float> lp(static_cast<size_t>(b.B * b.T));
      policy_.forward(b, lp.data());
      GrpoMetricSums routing;
      if (generation_weights) count_routing_mismatch(policy_, r, m0, m1, b.T, routing);
      LossInputs in = loss_inputs(r, m0, m1, lp.data(), b.T, prev_from_training, reference_.has_value());
      GrpoLossBatch lb{in.curr, in.prev, in.gen, in.ref, in.advantages, in.offsets, global_tokens, global_};
      std::vector<float> grad(in.curr.size());
      GrpoLossResult res = grpo_loss(config_.loss, lb, grad);
      res.sums.routing_decisions = routing.routing_decisions;
      res.sums.routing_mismatched = routing.routing_mismatched;
      std::vector<float> dlp(lp.size(), 0.0f);
      scatter_token_grads(r, m0, m1, b.T, grad, dlp.data());
      // The load-balancing loss, weighted by the micro-batch's share of the optimizer step's sequences.
      const double share = static_cast<double>(m1 - m0) / static_cast<double>(global_);
      if (policy_.config().is_moe()) {
        res.sums.moe_aux_loss = policy_.moe_aux_loss() * share;
        res.sums.moe_aux_loss_weight = share;
      }
      policy_.backward(dlp.data(), embedding_rows, config_.aux_loss_coef * share);
      return dist::to_bytes(res.sums);
    };
    const dist::AccumulateResult acc =
        dist::accumulate_gradients(comm_, policy_, static_cast<int64_t>(micro_batches.size()), run);
    for (const std::vector<std::byte>& bytes : acc.outputs) out.sums.merge(dist::from_bytes<GrpoMetricSums>(bytes));
    *communication_seconds += acc.communication_seconds;
    out.lr = schedule_.lr_at(config_.adam.lr, optimizer_.steps_taken() + skipped_total_ + out.skipped);
    const Timer optimizer_timer;
    out.grad_norm = dist::optimizer_step(comm_, optimizer_, policy_, out.lr, communication_seconds);
    if (std::isfinite(out.grad_norm)) {
      skipped_in_a_row_ = 0;
      policy_.refresh_weights();
    } else {  // the update never reaches the weights
      ++out.skipped;
      ++skipped_in_a_row_;
    }
    out.optimizer_seconds += optimizer_timer.seconds();
  }
  skipped_total_ += out.skipped;
  if (release_memory_) {  // until the next step's training
    policy_.release_activations();
    policy_.release_grads();
  }
  return out;
}

// The batch just trained on (or the first kv_calibration_samples_per_prompt responses of each
// prompt), prompt + response, with the updated weights: the amax of trainer forwards over all of
// it, computed once per distinct prefix (calibrate_qkv_amax). generation.kv_calibration_data adds
// (or, next_prompts, uses only) the prompts the next step will generate from, known now
// (draw_prompts is a function of the step), with the weights it will use; after the last step,
// which has no next one, the batch.
void GrpoJob::recalibrate_kv(int64_t step, const std::vector<Rollout>& r) {
  if (!fp8_kv_) return;
  const bool next_step = step + 1 < config_.grpo_max_num_steps;
  const bool use_batch = config_.kv_calibration_data != KvCalibrationData::kNextPrompts || !next_step;
  const bool use_next = config_.kv_calibration_data != KvCalibrationData::kBatch && next_step;
  const int64_t per_prompt = config_.kv_calibration_samples_per_prompt > 0 ? config_.kv_calibration_samples_per_prompt : G_;
  std::vector<std::vector<int32_t>> calib;
  for (size_t i = 0; use_batch && i < r.size(); ++i) {
    if (static_cast<int64_t>(i % static_cast<size_t>(G_)) >= per_prompt) continue;
    std::vector<int32_t> seq = r[i].prompt;
    seq.insert(seq.end(), r[i].response.begin(), r[i].response.end());
    calib.push_back(std::move(seq));
  }
  if (use_next)
    for (std::vector<int32_t>& p : step_prompts(step + 1)) calib.push_back(std::move(p));
  // The calibration forward keeps one layer's activations where a training micro-batch keeps
  // every layer's, so n_layers * micro sequences per call use less memory than training does.
  const int64_t calib_batch = micro_ * policy_.config().n_layers;
  kv_scales_ = kv_scales_of(calibrate_qkv_amax(policy_, std::move(calib), calib_batch, tokenizer_->pad()));
  use_kv_scales(kv_scales_);
  if (release_memory_) policy_.release_activations();
}

nlohmann::ordered_json GrpoJob::metrics_line(int64_t step, const StepRollouts& s, const TrainingResult& t,
                                             const GrpoMetrics& m) {
  double reward_sum = 0, correct = 0;
  for (const Rollout& x : s.rollouts) {
    reward_sum += x.reward;
    correct += x.reward >= 1.0f;
  }
  const auto finite_or_null = [](double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); };
  nlohmann::ordered_json line;
  line["step"] = step + 1;
  line["reward_mean"] = reward_sum / static_cast<double>(rollouts_);
  line["accuracy"] = correct / static_cast<double>(rollouts_);
  line["response_length_mean"] = static_cast<double>(s.tokens) / static_cast<double>(rollouts_);
  line["response_length_max"] = s.longest;
  for (const auto& [name, value] : named_metrics(m)) line[name] = finite_or_null(value);
  nlohmann::ordered_json by_length = nlohmann::ordered_json::object();  // the bins that hold responses
  for (int i = 0; i < kLengthBins; ++i)
    if (std::isfinite(m.token_mult_prob_error_by_length[i]))
      by_length[length_bin_name(i)] = m.token_mult_prob_error_by_length[i];
  line["token_mult_prob_error_by_length"] = by_length;
  if (policy_.config().is_moe()) {
    line["routing_mismatch"] = finite_or_null(m.routing_mismatch);
    line["moe_aux_loss"] = finite_or_null(m.moe_aux_loss);
  }
  line["grad_norm"] = finite_or_null(t.grad_norm);
  line["lr"] = t.lr;
  line["skipped_optimizer_steps"] = t.skipped;
  line["kv_waited"] = s.kv_waited;  // rollouts that waited for KV pages (admitted later, whole)
  if (!config_.reward.command.empty() || config_.reward.builtin != BuiltinRewardKind::kVerifier) {
    line["reward_metrics"] = s.reward_metrics.means;
    line["reward_timeouts"] = s.reward_metrics.timeouts;
  }
  if (environment_) {
    line["env_turns_mean"] = static_cast<double>(s.env_turns) / static_cast<double>(rollouts_);
    line["observation_tokens_mean"] = static_cast<double>(s.observation_tokens) / static_cast<double>(rollouts_);
  }
  if (fp8_kv_) line["kv_scales"] = scales_to_json(kv_scales_);
  const bool last = step + 1 == config_.grpo_max_num_steps;
  if ((config_.grpo_val_period > 0 && (step + 1) % config_.grpo_val_period == 0) || last) line["val_accuracy"] = validate();
  return line;
}

void GrpoJob::write_metrics(int64_t step, const nlohmann::ordered_json& line) {
  if (metrics_) metrics_->append(line.dump());
  if (tensorboard_) {
    tensorboard_->add_scalars(step + 1, unix_time_seconds(), metrics_line_scalars(line));
    tensorboard_->flush();
  }
}

void GrpoJob::check_divergence(int64_t step, int64_t skipped) const {
  if (root_)
    fmt::print(stderr, "grpo: warning: step {}: {} optimizer step(s) skipped for a non-finite loss or gradient\n", step + 1,
               skipped);
  FP8RL_REQUIRE(config_.grpo_max_consecutive_skipped_steps == 0 ||
                    skipped_in_a_row_ < config_.grpo_max_consecutive_skipped_steps,
                "grpo: step {}: {} optimizer steps in a row had a non-finite loss or gradient "
                "(grpo.max_consecutive_skipped_steps): the run has diverged and stops. Its last checkpoint is whole; "
                "lower policy.optimizer.lr or policy.max_grad_norm, and continue with --resume",
                step + 1, skipped_in_a_row_);
}

void GrpoJob::checkpoint(int64_t step) {
  nlohmann::json state = {{"step", step + 1}};
  if (fp8_kv_) state["kv_scales"] = scales_to_json(kv_scales_);
  dist::save_checkpoint(comm_, ckpt_dir_, policy_, optimizer_, state, config_.model_dir().value_or(""));
}

// The step's line on the terminal: a progress line redrawn in place, or one printed line.
void print_step(ProgressLine& progress, const RunConfig& config, int64_t step, const nlohmann::ordered_json& line,
                const GrpoMetrics& m, const StepTimings& time, std::string& last_validation) {
  if (line.contains("val_accuracy"))
    last_validation = fmt::format("  val acc {:.3f} @{}", line["val_accuracy"].get<double>(), step + 1);
  if (progress.enabled()) {
    // Most telling first: a narrow terminal cuts the end.
    progress.update(step + 1, fmt::format("reward {:.3f}{}  acc {:.3f}  mult_prob_err {:.4f}", line["reward_mean"].get<double>(),
                                          last_validation, line["accuracy"].get<double>(), m.token_mult_prob_error));
    return;
  }
  fmt::print("step {:>4}/{}  reward {:.3f}  acc {:.3f}  len {:.1f}  loss {:+.4f}  mult_prob_err {:.4f}  "
             "gen {:.2f}s rw {:.2f}s lp {:.2f}s train {:.2f}s refit {:.3f}s kv {:.3f}s{}\n",
             step + 1, config.grpo_max_num_steps, line["reward_mean"].get<double>(), line["accuracy"].get<double>(),
             line["response_length_mean"].get<double>(), m.loss, m.token_mult_prob_error, time.generation, time.reward,
             time.logprobs,
             time.training, time.refit, time.kv_calibration,
             line.contains("val_accuracy") ? fmt::format("  val acc {:.3f}", line["val_accuracy"].get<double>()) : "");
  std::fflush(stdout);
}

// The measured parts of a step's metrics line: the phase timings, throughput and peak memory.
void add_measurements(nlohmann::ordered_json& line, const StepTimings& time, int64_t tokens) {
  nlohmann::ordered_json& timing = line["timing"];
  timing["generation"] = time.generation;
  timing["reward"] = time.reward;
  timing["logprobs"] = time.logprobs;
  timing["training"] = time.training;
  timing["optimizer"] = time.optimizer;                                        // part of training
  if (dist::world().size() > 1) timing["communication"] = time.communication;  // part of training
  timing["refit"] = time.refit;
  timing["kv_calibration"] = time.kv_calibration;
  timing["total"] = time.total;
  line["tokens_per_s"] = {{"generation", static_cast<double>(tokens) / time.generation},
                          {"training", static_cast<double>(tokens) / time.training}};
  line["memory"] = {{"peak_rss_gib", gib(peak_rss_bytes())}};  // the process's peak so far (a measurement, like timing)
}

// Sums over this invocation's steps, for the closing line.
struct RunTotals {
  StepTimings time;
  double mult_prob_error = 0;
  double routing_mismatch = 0;  // MoE models (NaN otherwise: not printed)
  int64_t steps = 0, skipped = 0, kv_waited = 0;

  void add(const StepTimings& t, const GrpoMetrics& m, const TrainingResult& trained, const StepRollouts& s) {
    for (auto [total, part] : {std::pair{&time.generation, t.generation},
                               {&time.reward, t.reward},
                               {&time.logprobs, t.logprobs},
                               {&time.training, t.training},
                               {&time.optimizer, t.optimizer},
                               {&time.refit, t.refit},
                               {&time.kv_calibration, t.kv_calibration},
                               {&time.total, t.total}})
      *total += part;
    mult_prob_error += m.token_mult_prob_error;
    routing_mismatch += m.routing_mismatch;
    ++steps;
    skipped += trained.skipped;
    kv_waited += s.kv_waited;
  }
  void print(const GrpoJobResult& result) const {
    const double n = static_cast<double>(steps);
    const std::string routing =
        std::isfinite(routing_mismatch) ? fmt::format("; mean routing_mismatch {:.5f}", routing_mismatch / n) : "";
    fmt::print(
        "grpo: done. validation accuracy {:.3f} -> {:.3f}; mean token_mult_prob_error {:.5f}{}; mean step "
        "{:.2f}s = generation {:.2f} + reward {:.2f} + logprobs {:.2f} + training {:.2f} (optimizer {:.2f}) + refit {:.3f} + "
        "kv_calibration {:.3f}; {} skipped optimizer steps; {} rollouts waited for KV cache pages; peak RSS {:.2f} "
        "GiB\n",
        result.val_accuracy_before, result.val_accuracy_after, mult_prob_error / n, routing, time.total / n,
        time.generation / n, time.reward / n, time.logprobs / n, time.training / n, time.optimizer / n, time.refit / n,
        time.kv_calibration / n, skipped, kv_waited, gib(peak_rss_bytes()));
  }
};

}  // namespace

GrpoJobResult run_grpo_job(const RunConfig& config, const std::string& effective_yaml, bool resume,
                           int64_t stop_after) {
  GrpoJob job(config, resume);  // every input checked before the run directory is touched
  job.lock_run_directory();
  const bool root = dist::world().is_root();
  GrpoJobResult result;
  result.val_accuracy_before = job.start();
  job.open_run_directory(effective_yaml);
  ProgressLine progress("grpo", job.start_step(), config.grpo_max_num_steps, root && stdout_is_terminal());
  std::string last_validation;  // the progress line's "val acc X @STEP"
  RunTotals totals;
  for (int64_t step = job.start_step(); step < config.grpo_max_num_steps; ++step) {
    StepTimings time;
    Timer step_timer, t;
    StepRollouts s = job.generate(step);                                  // 1. rollouts
    time.generation = t.lap();
    job.score(step, s);                                                   // 2-3. rewards, advantages
    time.reward = t.lap();
    job.old_logprobs(s.rollouts);                                         // 4. prev and reference log-probs
    time.logprobs = t.lap();
    const TrainingResult trained = job.train(s.rollouts, &time.communication);  // 5. optimizer steps
    time.training = t.lap();
    time.optimizer = trained.optimizer_seconds;
    if (trained.skipped > 0) {  // warns; stops a diverged run
      progress.end_line();
      job.check_divergence(step, trained.skipped);
    }
    job.refit();                                                          // 6. refit
    time.refit = t.lap();
    job.recalibrate_kv(step, s.rollouts);                                 // 7. KV scales (FP8 KV cache)
    time.kv_calibration = t.lap();
    const GrpoMetrics m = trained.sums.finalize();                        // 8. metrics (and validation)
    nlohmann::ordered_json line = job.metrics_line(step, s, trained, m);
    time.total = step_timer.seconds();
    add_measurements(line, time, s.tokens);
    job.write_metrics(step, line);
    if (root) print_step(progress, config, step, line, m, time, last_validation);
    totals.add(time, m, trained, s);

    const bool last = step + 1 == config.grpo_max_num_steps;          // 9. checkpoint
    const bool stopping = stop_after > 0 && totals.steps == stop_after && !last;
    if ((config.save_period > 0 && (step + 1) % config.save_period == 0) || last || stopping) job.checkpoint(step);
    if (last) result.val_accuracy_after = line["val_accuracy"].get<double>();
    if (stopping) {
      progress.end_line();
      if (root) fmt::print("grpo: stopping after {} steps as asked (--stop-after); continue with --resume\n", totals.steps);
      break;
    }
  }
  progress.end_line();
  result.steps = totals.steps;
  if (root && job.start_step() + result.steps == config.grpo_max_num_steps) job.export_model();
  dist::world().barrier();
  if (root && result.steps > 0) totals.print(result);
  return result;
}

}  // namespace fp8rl
