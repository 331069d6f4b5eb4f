#include "rl/grpo.h"

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
#include "io/tfevents.h"
#include "model/checkpoint.h"
#include "rl/advantages.h"
#include "rl/dist/data_parallel.h"
#include "rl/evaluate.h"
#include "rl/grpo_loss.h"
#include "rl/refit.h"
#include "rl/model_source.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// Random streams of grpo.seed (the generator's sampling uses the sequence index as its stream).
constexpr uint64_t kPromptStream = 1ull << 40;

// policy.release_memory_between_phases: auto frees each phase's buffers from this many parameters
// on (gigabytes of buffers at such sizes; below it, touching the pages again costs more than the
// memory is worth).
constexpr int64_t kReleaseMemoryParams = 100'000'000;

// One rollout: prompt p's sample g, with everything the trainer needs.
struct Rollout {
  const Example* example = nullptr;
  std::vector<int32_t> prompt;    // bos + prompt tokens
  std::vector<int32_t> response;  // generated tokens (eos included when generated)
  std::vector<float> gen, prev, ref;  // [response tokens]
  float reward = 0, advantage = 0;
};

// Right-padded trainer batch of rollouts [begin, end): targets are the response tokens.
TokenBatch rollout_batch(const std::vector<Rollout>& r, size_t begin, size_t end, int32_t pad) {
  int64_t T = 1;
  for (size_t i = begin; i < end; ++i) T = std::max<int64_t>(T, static_cast<int64_t>(r[i].prompt.size() + r[i].response.size()));
  TokenBatch b = TokenBatch::empty(static_cast<int64_t>(end - begin), T, pad);
  for (size_t i = begin; i < end; ++i) {
    const size_t row0 = (i - begin) * static_cast<size_t>(T);
    std::copy(r[i].prompt.begin(), r[i].prompt.end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(row0));
    std::copy(r[i].response.begin(), r[i].response.end(),
              b.tokens.begin() + static_cast<std::ptrdiff_t>(row0 + r[i].prompt.size()));
    // Row prompt.size()-1+j predicts response[j]. The last response token is input to no row
    // that matters; the batch's length counts it so its K/V exist for calibration.
    for (size_t j = 0; j < r[i].response.size(); ++j) b.targets[row0 + r[i].prompt.size() - 1 + j] = r[i].response[j];
    b.lengths[i - begin] = static_cast<int32_t>(r[i].prompt.size() + r[i].response.size());
  }
  return b;
}

// Log-probs of the response tokens of rollouts [begin, end) under `model`, appended to `out`
// per rollout (out[i] for rollout i). Through the prefix layout: a prompt's rows are computed
// once for its G samples and padding costs nothing, with the padded forward's bits.
void response_logprobs(Transformer& model, std::vector<Rollout>& r, size_t begin, size_t end, int32_t pad,
                       std::vector<float> Rollout::*field) {
  const TokenBatch b = rollout_batch(r, begin, end, pad);
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

}  // namespace

GrpoJobResult run_grpo_job(const RunConfig& config, const std::string& effective_yaml, bool resume,
                           int64_t stop_after) {
  // ---- validate every input before touching the run directory --------------------------------
  config.validate_grpo();
  const int64_t P = config.num_prompts_per_step, G = config.num_generations_per_prompt, rollouts = P * G;
  const int64_t global = config.train_global_batch_size, micro = std::min(config.train_micro_batch_size, global);
  FP8RL_REQUIRE(rollouts % global == 0,
              "policy.train_global_batch_size ({}) must divide grpo.num_prompts_per_step * num_generations_per_prompt ({})",
              global, rollouts);
  const std::unique_ptr<Task> task = make_task(config);
  // The world of this run (docs/distributed.md): each rank generates its share of the prompts
  // and trains its share of the micro-batches; rank 0 alone writes the run directory.
  const dist::Communicator& comm = dist::world();
  const bool root = comm.is_root();
  const fs::path run_dir = config.log_dir, ckpt_dir = run_dir / "checkpoint";
  if (resume && !fs::exists(ckpt_dir / "trainer_state.json")) {
    // Stopped before its first checkpoint (or never started): nothing to continue but the start.
    if (root)
      fmt::print("grpo: --resume: '{}' holds no checkpoint yet; the run starts from step 0\n", run_dir.string());
    resume = false;
  } else if (!resume) {
    FP8RL_REQUIRE(!fs::exists(run_dir / "metrics.jsonl"),
                  "run directory '{}' already holds a run: pass --resume to continue it (from its last checkpoint, "
                  "or from the start if it has none yet), or choose another logger.log_dir",
                  run_dir.string());
  }
  Transformer policy = load_job_model(config);
  const std::unique_ptr<Tokenizer> tokenizer = load_job_tokenizer(config, policy.config());
  const Tokenizer& tok = *tokenizer;
  // Every prompt framed and encoded once (and checked to fit the model).
  const std::vector<std::vector<int32_t>> train_ids =
      encode_prompts(tok, task->train(), config.max_new_tokens, policy.config().max_seq_len, "training");
  const std::vector<std::vector<int32_t>> val_ids =
      encode_prompts(tok, task->validation(), config.max_new_tokens, policy.config().max_seq_len, "validation");
  const bool use_reference = config.loss.reference_policy_kl_penalty > 0;
  // The KL term's reference: the initial weights, frozen (the low-precision copies the policy's
  // forward reads, no masters, no gradients), taken before a resume loads the checkpoint.
  std::optional<Transformer> reference;
  if (use_reference) reference.emplace(policy.frozen_copy());
  // Under several ranks each keeps the moments of its shard only (rl/dist/data_parallel.h).
  AdamW optimizer(policy.layout(), config.adam, dist::optimizer_range(policy.num_params(), comm.rank(), comm.size()));
  LrSchedule schedule = config.schedule;
  if (schedule.total_steps == 0) schedule.total_steps = config.grpo_max_num_steps * (rollouts / global);
  GenerationEngine generator(policy.config(), config.generator_policy(), config.engine_options());
  // Each phase's buffers (the KV cache's pages and the generator's packed weights, the log-prob
  // forwards' scratch, the training activations and gradients) freed when the phase ends, so that
  // the peak is the largest phase's, not their sum.
  const bool release_memory = config.release_memory_between_phases == "true" ||
                              (config.release_memory_between_phases == "auto" && policy.num_params() >= kReleaseMemoryParams);
  const bool fp8_kv = generator.kv_cache().dtype() == KvDtype::kFP8;
  const KvScaleGranularity kv_granularity = parse_kv_scale_granularity(config.kv_scale_granularity);
  const auto kv_scales_of = [&](const std::vector<Transformer::QkvAmax>& amax) {
    return kv_scales_from_amax(amax, kv_granularity, static_cast<float>(config.kv_scale_margin));
  };
  // The generator's scales, and with policy.fp8_kv_attention the trainer's attention's too.
  const auto use_kv_scales = [&](const std::vector<QkvScales>& scales) {
    generator.set_kv_scales(scales);
    if (config.fp8_kv_attention)
      policy.set_attention_e4m3_scales(attention_e4m3_scales(scales, policy.config().n_kv_heads, config.fp8_attention));
  };

  int64_t start_step = 0;
  std::vector<QkvScales> kv_scales;
  if (resume) {
    load_model_weights(ckpt_dir, policy);
    load_optimizer_state(ckpt_dir, optimizer);
    const nlohmann::json state = load_trainer_state(ckpt_dir);
    start_step = trainer_state_step(state, ckpt_dir, "step", config.grpo_max_num_steps);
    // Each GRPO step takes rollouts / global optimizer steps, less the skipped ones.
    FP8RL_REQUIRE(optimizer.steps_taken() <= start_step * (rollouts / global),
                  "checkpoint '{}': the optimizer state has taken {} steps, more than {} GRPO steps of {} can "
                  "(optimizer.safetensors and trainer_state.json are from different runs?)",
                  ckpt_dir.string(), optimizer.steps_taken(), start_step, rollouts / global);
    if (fp8_kv) kv_scales = scales_from_json(state, ckpt_dir, policy.config().n_layers);
  }

  // ---- run directory ---------------------------------------------------------------------------
  comm.barrier();  // every rank has checked the directory (and read the checkpoint) before rank 0 writes
  // One job at a time in a run directory (a second train, or a --resume of a running run, stops here).
  std::optional<RunDirectoryLock> lock;
  if (root) lock.emplace(run_dir);
  std::optional<MetricsLog> metrics;
  std::optional<TfEventsWriter> tensorboard;  // a new event file per invocation (resumed runs too)
  if (root) {
    fs::create_directories(run_dir);
    remove_stale_temporaries(run_dir, "checkpoint");  // leftovers of a crash during a checkpoint write
    write_file_atomic(run_dir / "config.yaml", effective_yaml);
    if (resume) {
      int64_t kept = 0;
      metrics.emplace(MetricsLog::resume(run_dir / "metrics.jsonl", start_step, &kept));
      if (kept < start_step)
        fmt::print(stderr, "grpo: warning: '{}' held {} step lines for a checkpoint at step {}: steps {}-{} have none\n",
                   (run_dir / "metrics.jsonl").string(), kept, start_step, kept + 1, start_step);
      truncate_event_files(run_dir, start_step);  // TensorBoard's copy of the metrics, likewise
    } else {
      metrics.emplace(MetricsLog::create(run_dir / "metrics.jsonl"));
    }
    if (config.tensorboard_enabled) tensorboard.emplace(run_dir);
  }

  GenerateOptions gen_opts;
  gen_opts.max_new_tokens = config.max_new_tokens;
  gen_opts.sampling = {static_cast<float>(config.temperature), config.top_k, static_cast<float>(config.top_p),
                       static_cast<uint64_t>(config.grpo_seed)};
  gen_opts.eos = tok.eos();
  gen_opts.share_prefix = config.share_prefix;
  GenerateOptions val_opts = gen_opts;
  val_opts.sampling.temperature = 0.0f;
  auto validate = [&] {  // each rank answers its share; the rewards are summed in example order
    const auto& val = task->validation();
    const int64_t n = std::min<int64_t>(config.val_max_examples, static_cast<int64_t>(val.size()));
    const dist::Share share = dist::share_of(n, comm.rank(), comm.size());
    const std::vector<std::vector<int32_t>> prompts(val_ids.begin() + share.begin, val_ids.begin() + share.end);
    std::vector<double> mine;
    if (!prompts.empty()) {
      const auto out = generator.generate(prompts, 1, val_opts);
      for (int64_t i = share.begin; i < share.end; ++i)
        mine.push_back(task->reward(val[static_cast<size_t>(i)], tok.decode_response(out[static_cast<size_t>(i - share.begin)].tokens)));
    }
    double total = 0;
    for (double reward : dist::allgather_values(comm, mine)) total += reward;
    return total / static_cast<double>(n);
  };
  auto draw_prompts = [&](int64_t step) {
    std::vector<const Example*> picks;
    const auto& train = task->train();
    for (int64_t i = 0; i < P; ++i)
      picks.push_back(&train[random_u32(static_cast<uint64_t>(config.grpo_seed), kPromptStream,
                                        static_cast<uint64_t>(step * P + i)) % train.size()]);
    return picks;
  };
  auto step_prompts = [&](int64_t step) {  // the framed prompt ids of each pick
    std::vector<std::vector<int32_t>> prompts;
    for (const Example* e : draw_prompts(step))
      prompts.push_back(train_ids[static_cast<size_t>(e - task->train().data())]);
    return prompts;
  };

  refit_generator_weights(policy, generator);
  if (fp8_kv) {
    if (kv_scales.empty()) {
      // Before the first step: calibrate on the first step's prompts.
      std::vector<std::vector<int32_t>> calib = step_prompts(start_step);
      kv_scales = kv_scales_of(calibrate_qkv_amax(policy, std::move(calib), P, tok.pad()));
    }
    use_kv_scales(kv_scales);
  }

  GrpoJobResult result;
  result.val_accuracy_before = validate();
  if (root) {
    fmt::print("grpo: {} parameters; trainer {} / generator {} linears, KV cache {} ({} tokens in {} MiB); "
               "{} prompts x {} samples per step{}; validation accuracy at start {:.3f}\n",
               policy.num_params(), config.precision, config.generation_precision, config.kv_cache_dtype,
               generator.kv_cache().capacity_tokens(), generator.kv_cache().storage_bytes() >> 20, P, G,
               comm.size() > 1 ? fmt::format(" on {} processes x {} threads", comm.size(), kernel_thread_pool().size()) : "",
               result.val_accuracy_before);
    std::fflush(stdout);
  }

  ProgressLine progress("grpo", start_step, config.grpo_max_num_steps, root && stdout_is_terminal());
  std::string last_validation;  // the progress line's "val acc X @STEP"
  double sum_mult_err = 0, sum_time[6] = {};
  int64_t skipped_total = 0, kv_waited_total = 0;
  int64_t skipped_in_a_row = 0;  // optimizer steps (grpo.max_consecutive_skipped_steps)
  for (int64_t step = start_step; step < config.grpo_max_num_steps; ++step) {
    Timer step_timer, t;
    // 1. generation
    const std::vector<const Example*> picks = draw_prompts(step);
    const std::vector<std::vector<int32_t>> prompts = step_prompts(step);
    // This rank's share of the prompts (whole groups); sequence (p, g) draws from stream
    // step * rollouts + p * G + g whichever rank generates it.
    const dist::Share share = dist::share_of(P, comm.rank(), comm.size());
    std::vector<GeneratedSequence> mine;
    int64_t kv_waited = 0;
    if (share.end > share.begin) {
      gen_opts.first_sequence_index = static_cast<uint64_t>(step * rollouts + share.begin * G);
      mine = generator.generate({prompts.begin() + share.begin, prompts.begin() + share.end}, G, gen_opts);
      for (GeneratedSequence& s : mine) s.prompt_index += share.begin;
      kv_waited = generator.last_stats().kv_waited;
    }
    if (release_memory) generator.release_memory();  // packed again by the refit
    const std::vector<GeneratedSequence> seqs = dist::allgather_sequences(comm, std::move(mine));
    if (comm.size() > 1) {  // the rollouts of every rank that waited
      const std::vector<int64_t> waited = dist::allgather_values(comm, std::vector<int64_t>{kv_waited});
      kv_waited = 0;
      for (int64_t w : waited) kv_waited += w;
    }
    const double t_generation = t.seconds();
    kv_waited_total += kv_waited;
    // 2. rewards and 3. advantages
    std::vector<Rollout> r(static_cast<size_t>(rollouts));
    std::vector<float> rewards(r.size());
    int64_t gen_tokens = 0, max_len = 0;
    for (size_t i = 0; i < r.size(); ++i) {
      r[i].example = picks[i / static_cast<size_t>(G)];
      r[i].prompt = prompts[i / static_cast<size_t>(G)];
      r[i].response = seqs[i].tokens;
      r[i].gen = seqs[i].logprobs;
      r[i].reward = static_cast<float>(task->reward(*r[i].example, tok.decode_response(r[i].response)));
      rewards[i] = r[i].reward;
      gen_tokens += static_cast<int64_t>(r[i].response.size());
      max_len = std::max<int64_t>(max_len, static_cast<int64_t>(r[i].response.size()));
    }
    const std::vector<float> adv = compute_advantages(rewards, G, config.advantages);
    for (size_t i = 0; i < r.size(); ++i) r[i].advantage = adv[i];
    // 4. prev and reference log-probs. With a single optimizer step per GRPO step, the training
    // forward runs the same weights on the same micro-batches, so its log-probs are prev bit for
    // bit and the separate pass is skipped.
    t.reset();
    const bool prev_from_training = rollouts == global;
    // The micro-batches of each optimizer step, [m0, m1) of r; micro-batch k of a step runs on
    // rank k % N, which alone needs its log-probs.
    std::vector<std::vector<std::pair<size_t, size_t>>> optimizer_steps;
    for (size_t g0 = 0; g0 < r.size(); g0 += static_cast<size_t>(global)) {
      optimizer_steps.emplace_back();
      for (size_t m0 = g0; m0 < g0 + static_cast<size_t>(global); m0 += static_cast<size_t>(micro))
        optimizer_steps.back().emplace_back(m0, std::min(g0 + static_cast<size_t>(global), m0 + static_cast<size_t>(micro)));
    }
    for (const auto& micro_batches : optimizer_steps)
      for (size_t k = 0; k < micro_batches.size(); ++k) {
        if (!dist::runs_micro_batch(static_cast<int64_t>(k), comm.rank(), comm.size())) continue;
        const auto [m0, m1] = micro_batches[k];
        if (!prev_from_training) response_logprobs(policy, r, m0, m1, tok.pad(), &Rollout::prev);
        if (use_reference) response_logprobs(*reference, r, m0, m1, tok.pad(), &Rollout::ref);
      }
    if (release_memory) {
      policy.release_activations();
      if (use_reference) reference->release_activations();
    }
    const double t_logprobs = t.seconds();
    // 5. optimizer steps
    t.reset();
    GrpoMetricSums sums;
    double grad_norm = 0, lr = 0, t_communication = 0;
    int64_t skipped = 0;
    for (const auto& micro_batches : optimizer_steps) {
      const size_t g0 = micro_batches.front().first, g1 = micro_batches.back().second;
      int64_t global_tokens = 0;
      for (size_t i = g0; i < g1; ++i) global_tokens += static_cast<int64_t>(r[i].response.size());
      // One micro-batch: forward, loss, backward; its metric sums go to every rank.
      const auto run = [&](int64_t k, EmbeddingRowGrads* embedding_rows) {
        const auto [m0, m1] = micro_batches[static_cast<size_t>(k)];
        const TokenBatch b = rollout_batch(r, m0, m1, tok.pad());
        std::vector<float> lp(static_cast<size_t>(b.B * b.T));
        policy.forward(b, lp.data());
        std::vector<float> curr, prev, gen, ref, advs;
        std::vector<int64_t> offsets = {0};
        for (size_t i = m0; i < m1; ++i) {
          const size_t start = (i - m0) * static_cast<size_t>(b.T) + r[i].prompt.size() - 1;
          if (prev_from_training)
            r[i].prev.assign(lp.begin() + static_cast<std::ptrdiff_t>(start),
                             lp.begin() + static_cast<std::ptrdiff_t>(start + r[i].response.size()));
          curr.insert(curr.end(), lp.begin() + static_cast<std::ptrdiff_t>(start),
                      lp.begin() + static_cast<std::ptrdiff_t>(start + r[i].response.size()));
          prev.insert(prev.end(), r[i].prev.begin(), r[i].prev.end());
          gen.insert(gen.end(), r[i].gen.begin(), r[i].gen.end());
          if (use_reference) ref.insert(ref.end(), r[i].ref.begin(), r[i].ref.end());
          advs.push_back(r[i].advantage);
          offsets.push_back(static_cast<int64_t>(curr.size()));
        }
        GrpoLossBatch lb{curr, prev, gen, ref, advs, offsets, global_tokens, global};
        std::vector<float> grad(curr.size());
        const GrpoLossResult res = grpo_loss(config.loss, lb, grad);
        std::vector<float> dlp(lp.size(), 0.0f);
        for (size_t i = m0, n = 0; i < m1; ++i) {
          const size_t start = (i - m0) * static_cast<size_t>(b.T) + r[i].prompt.size() - 1;
          for (size_t j = 0; j < r[i].response.size(); ++j) dlp[start + j] = grad[n++];
        }
        policy.backward(dlp.data(), embedding_rows);
        return dist::to_bytes(res.sums);
      };
      const dist::AccumulateResult acc =
          dist::accumulate_gradients(comm, policy, static_cast<int64_t>(micro_batches.size()), run);
      for (const std::vector<std::byte>& bytes : acc.outputs) sums.merge(dist::from_bytes<GrpoMetricSums>(bytes));
      t_communication += acc.communication_seconds;
      lr = schedule.lr_at(config.adam.lr, optimizer.steps_taken() + skipped_total + skipped);
      grad_norm = dist::optimizer_step(comm, optimizer, policy, lr, &t_communication);
      if (!std::isfinite(grad_norm)) {
        ++skipped;
        ++skipped_in_a_row;
        progress.end_line();
        if (root) fmt::print(stderr, "grpo: warning: step {}: non-finite loss or gradient, optimizer step skipped\n", step + 1);
        FP8RL_REQUIRE(config.grpo_max_consecutive_skipped_steps == 0 ||
                          skipped_in_a_row < config.grpo_max_consecutive_skipped_steps,
                      "grpo: step {}: {} optimizer steps in a row had a non-finite loss or gradient "
                      "(grpo.max_consecutive_skipped_steps): the run has diverged and stops. Its last checkpoint is "
                      "whole; lower policy.optimizer.lr or policy.max_grad_norm, and continue with --resume",
                      step + 1, skipped_in_a_row);
      } else {
        skipped_in_a_row = 0;
        policy.refresh_weights();
      }
    }
    skipped_total += skipped;
    if (release_memory) {  // until the next step's training
      policy.release_activations();
      policy.release_grads();
    }
    const double t_training = t.seconds();
    // 6. refit, and KV-scale recalibration on the batch just trained on
    t.reset();
    refit_generator_weights(policy, generator);
    const double t_refit = t.seconds();
    t.reset();
    if (fp8_kv) {
      // The batch just trained on (or the first kv_calibration_samples_per_prompt responses of
      // each prompt), prompt + response, with the updated weights: the amax of trainer forwards
      // over all of it, computed once per distinct prefix (calibrate_qkv_amax).
      // generation.kv_calibration_data adds (or, next_prompts, uses only) the prompts the next
      // step will generate from, known now (draw_prompts is a function of the step), with the
      // weights it will use; after the last step, which has no next one, the batch.
      const bool next_step = step + 1 < config.grpo_max_num_steps;
      const bool use_batch = config.kv_calibration_data != "next_prompts" || !next_step;
      const bool use_next = config.kv_calibration_data != "batch" && next_step;
      const int64_t per_prompt = config.kv_calibration_samples_per_prompt > 0 ? config.kv_calibration_samples_per_prompt : G;
      std::vector<std::vector<int32_t>> calib;
      for (size_t i = 0; use_batch && i < r.size(); ++i) {
        if (static_cast<int64_t>(i % static_cast<size_t>(G)) >= per_prompt) continue;
        std::vector<int32_t> seq = r[i].prompt;
        seq.insert(seq.end(), r[i].response.begin(), r[i].response.end());
        calib.push_back(std::move(seq));
      }
      if (use_next)
        for (std::vector<int32_t>& p : step_prompts(step + 1)) calib.push_back(std::move(p));
      // The calibration forward keeps one layer's activations where a training micro-batch keeps
      // every layer's, so n_layers * micro sequences per call use less memory than training does.
      const int64_t calib_batch = micro * policy.config().n_layers;
      kv_scales = kv_scales_of(calibrate_qkv_amax(policy, std::move(calib), calib_batch, tok.pad()));
      use_kv_scales(kv_scales);
      if (release_memory) policy.release_activations();
    }
    const double t_kv = t.seconds();
    // 7. metrics
    const GrpoMetrics gm = sums.finalize();
    double reward_sum = 0, correct = 0;
    for (const Rollout& x : r) {
      reward_sum += x.reward;
      correct += x.reward >= 1.0f;
    }
    nlohmann::ordered_json line;
    line["step"] = step + 1;
    line["reward_mean"] = reward_sum / static_cast<double>(rollouts);
    line["accuracy"] = correct / static_cast<double>(rollouts);
    line["response_length_mean"] = static_cast<double>(gen_tokens) / static_cast<double>(rollouts);
    line["response_length_max"] = max_len;
    for (const auto& [name, value] : named_metrics(gm)) line[name] = std::isfinite(value) ? nlohmann::json(value) : nlohmann::json(nullptr);
    line["grad_norm"] = std::isfinite(grad_norm) ? nlohmann::json(grad_norm) : nlohmann::json(nullptr);
    line["lr"] = lr;
    line["skipped_optimizer_steps"] = skipped;
    line["kv_waited"] = kv_waited;  // rollouts that waited for KV pages (admitted later, whole)
    if (fp8_kv) line["kv_scales"] = scales_to_json(kv_scales);
    const bool last = step + 1 == config.grpo_max_num_steps;
    if ((config.grpo_val_period > 0 && (step + 1) % config.grpo_val_period == 0) || last) {
      line["val_accuracy"] = validate();
      if (last) result.val_accuracy_after = line["val_accuracy"].get<double>();
    }
    const double total = step_timer.seconds();
    line["timing"] = {{"generation", t_generation}, {"logprobs", t_logprobs}, {"training", t_training},
                      {"refit", t_refit},           {"kv_calibration", t_kv}, {"total", total}};
    if (comm.size() > 1) line["timing"]["communication"] = t_communication;  // part of training
    line["tokens_per_s"] = {{"generation", static_cast<double>(gen_tokens) / t_generation},
                            {"training", static_cast<double>(gen_tokens) / t_training}};
    line["memory"] = {{"peak_rss_gib", gib(peak_rss_bytes())}};  // the process's peak so far (a measurement, like timing)
    if (metrics) metrics->append(line.dump());
    if (tensorboard) {
      tensorboard->add_scalars(step + 1, unix_time_seconds(), metrics_line_scalars(line));
      tensorboard->flush();
    }
    sum_mult_err += gm.token_mult_prob_error;
    const double times[6] = {t_generation, t_logprobs, t_training, t_refit, t_kv, total};
    for (int i = 0; i < 6; ++i) sum_time[i] += times[i];
    if (line.contains("val_accuracy"))
      last_validation = fmt::format("  val acc {:.3f} @{}", line["val_accuracy"].get<double>(), step + 1);
    if (progress.enabled()) {
      // Most telling first: a narrow terminal cuts the end.
      progress.update(
          step + 1, fmt::format("reward {:.3f}{}  acc {:.3f}  mult_prob_err {:.4f}", line["reward_mean"].get<double>(),
                                last_validation, line["accuracy"].get<double>(), gm.token_mult_prob_error));
    } else if (root) {
      fmt::print(
          "step {:>4}/{}  reward {:.3f}  acc {:.3f}  len {:.1f}  loss {:+.4f}  mult_prob_err {:.4f}  "
          "gen {:.2f}s lp {:.2f}s train {:.2f}s refit {:.3f}s kv {:.3f}s{}\n",
          step + 1, config.grpo_max_num_steps, line["reward_mean"].get<double>(), line["accuracy"].get<double>(),
          line["response_length_mean"].get<double>(), gm.loss, gm.token_mult_prob_error, t_generation, t_logprobs,
          t_training, t_refit, t_kv,
          line.contains("val_accuracy") ? fmt::format("  val acc {:.3f}", line["val_accuracy"].get<double>()) : "");
      std::fflush(stdout);
    }
    // 8. checkpoint
    const bool stopping = stop_after > 0 && result.steps + 1 == stop_after && !last;
    if ((config.save_period > 0 && (step + 1) % config.save_period == 0) || last || stopping) {
      nlohmann::json state = {{"step", step + 1}};
      if (fp8_kv) state["kv_scales"] = scales_to_json(kv_scales);
      dist::save_checkpoint(comm, ckpt_dir, policy, optimizer, state, config.model_dir().value_or(""));
    }
    ++result.steps;
    if (stopping) {
      progress.end_line();
      if (root) fmt::print("grpo: stopping after {} steps as asked (--stop-after); continue with --resume\n", result.steps);
      break;
    }
  }
  progress.end_line();
  if (root && start_step + result.steps == config.grpo_max_num_steps) export_job_model(config, policy);
  comm.barrier();
  if (root && result.steps > 0) {
    const double n = static_cast<double>(result.steps);
    fmt::print("grpo: done. validation accuracy {:.3f} -> {:.3f}; mean token_mult_prob_error {:.5f}; mean step "
               "{:.2f}s = generation {:.2f} + logprobs {:.2f} + training {:.2f} + refit {:.3f} + kv_calibration {:.3f}; "
               "{} skipped optimizer steps; {} rollouts waited for KV cache pages; peak RSS {:.2f} GiB\n",
               result.val_accuracy_before, result.val_accuracy_after, sum_mult_err / n, sum_time[5] / n, sum_time[0] / n,
               sum_time[1] / n, sum_time[2] / n, sum_time[3] / n, sum_time[4] / n, skipped_total, kv_waited_total,
               gib(peak_rss_bytes()));
  }
  return result;
}

}  // namespace fp8rl
