// The GRPO loop end to end on the `tiny` model: SFT warm start, then fp8-e2e GRPO improves the
// reward with near-perfect generator/trainer agreement; runs are deterministic; --resume gives
// the uninterrupted run's metrics; bad inputs leave no run directory behind.
// ctest-file-label: slow
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/rng.h"
#include "model/checkpoint.h"
#include "jobs/grpo.h"
#include "rl/refit.h"
#include "jobs/sft_job.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

// Loads recipes/<recipe> with the overrides (the same path `fp8rl train` takes).
std::string load(RunConfig& config, ConfigSchema& schema, const std::string& recipe, std::vector<std::string> overrides) {
  bind_run_config(schema, config);
  schema.load(fs::path(FP8RL_SOURCE_DIR) / "recipes" / recipe, overrides);
  return schema.to_yaml();
}

const std::vector<std::string> kEasyTask = {"model.preset=tiny", "model.max_seq_len=16",
                                            "task.arithmetic.min_operand_digits=1",
                                            "task.arithmetic.max_operand_digits=1", "task.arithmetic.operators=+",
                                            "task.arithmetic.val_size=40", "task.arithmetic.train_size=2000",
                                            "eval.max_examples=40", "generation.max_new_tokens=4"};

// A tiny SFT checkpoint, shared by the tests of this file (removed when the process exits).
const fs::path& warm_start() {
  static const testing::TempDir tmp;
  static const fs::path dir = [] {
    const fs::path run = tmp / "sft";
    ConfigSchema schema;
    RunConfig config;
    std::vector<std::string> o = kEasyTask;
    o.insert(o.end(), {"logger.log_dir=" + run.string(), "sft.max_num_steps=100", "sft.val_period=0",
                       "policy.optimizer.lr=0.005", "policy.train_global_batch_size=64"});
    run_sft_job(config, load(config, schema, "sft-arithmetic.yaml", o));
    return run / "checkpoint";
  }();
  return dir;
}

std::vector<std::string> grpo_overrides(const fs::path& run, int steps, int prompts = 8) {
  std::vector<std::string> o = kEasyTask;
  o.insert(o.end(), {"model.checkpoint=" + warm_start().string(), "logger.log_dir=" + run.string(),
                     "grpo.max_num_steps=" + std::to_string(steps), "grpo.num_prompts_per_step=" + std::to_string(prompts),
                     "grpo.num_generations_per_prompt=8", "policy.train_global_batch_size=" + std::to_string(8 * prompts),
                     "policy.train_micro_batch_size=128", "policy.optimizer.lr=0.0003", "grpo.val_period=0"});
  return o;
}

std::vector<nlohmann::json> read_metrics(const fs::path& run, bool drop_timings) {
  std::ifstream in(run / "metrics.jsonl");
  std::vector<nlohmann::json> lines;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (drop_timings) j.erase("timing"), j.erase("tokens_per_s"), j.erase("memory");  // measurements
    lines.push_back(j);
  }
  return lines;
}

// The KV calibration of the GRPO loop (calibrate_qkv_amax: distinct sequences once, shared
// prefixes once) gives the amax of the whole-batch trainer forwards it replaced, bit for bit:
// 6 prompts x 8 rollouts whose short responses repeat, some empty (the rollout is its prompt,
// a prefix of its siblings), against padded micro-batch forwards in rollout order.
// The reference policy's log-probs come from prefix_logprobs (each distinct prefix once, no
// padding): the padded forward's log-probs bit for bit, on a batch of prompts with several
// samples each (shared prompts, repeated and empty responses, padding, prompt positions scored
// too), BF16 and FP8 linears, FP32 LM head or not.
// ctest-label: quick
TEST(GrpoReferenceLogprobs, PrefixLayoutEqualsThePaddedForward) {
  const int32_t pad = 0;
  const int64_t B = 12;
  int64_t T = 0;
  std::vector<std::vector<int32_t>> seqs;
  for (uint64_t p = 0; p < 3; ++p) {
    std::vector<int32_t> prompt = {1};
    for (uint64_t i = 0; i < 3 + p; ++i) prompt.push_back(static_cast<int32_t>(5 + random_u32(9, 1, p * 16 + i) % 12));
    for (uint64_t g = 0; g < 4; ++g) {
      std::vector<int32_t> seq = prompt;
      const uint32_t len = random_u32(9, 2, p * 8 + g) % 4;
      for (uint32_t j = 0; j < len; ++j) seq.push_back(static_cast<int32_t>(2 + random_u32(9, 3, p * 64 + g * 8 + j) % 3));
      T = std::max<int64_t>(T, static_cast<int64_t>(seq.size()));
      seqs.push_back(seq);
    }
  }
  TokenBatch b = TokenBatch::empty(B, T, pad);
  for (int64_t i = 0; i < B; ++i) {
    const auto& s = seqs[static_cast<size_t>(i)];
    std::copy(s.begin(), s.end(), b.tokens.begin() + i * T);
    b.lengths[static_cast<size_t>(i)] = static_cast<int32_t>(s.size());
    for (size_t t = 0; t + 1 < s.size(); ++t) b.targets[static_cast<size_t>(i * T) + t] = s[t + 1];
  }
  for (Precision linear : {Precision::kBF16, Precision::kFP8})
    for (bool fp32_lm_head : {false, true}) {
      PrecisionPolicy policy;
      policy.linear = linear;
      policy.fp32_lm_head = fp32_lm_head;
      Transformer model(model_preset("tiny", 20), policy);
      model.init_random(3);
      std::vector<float> want(static_cast<size_t>(B * T)), got(want.size(), 1.0f);
      model.forward(b, want.data(), /*for_backward=*/false);
      model.prefix_logprobs(b, got.data());
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * sizeof(float)), 0)
          << precision_name(linear) << (fp32_lm_head ? " fp32 lm head" : "") << ": first " << got[1] << " vs "
          << want[1];
    }
}

// ctest-label: quick
TEST(GrpoKvCalibration, EqualsTheWholeBatchForwardsItReplaced) {
  const int32_t pad = 0;
  std::vector<std::vector<int32_t>> seqs;
  for (uint64_t p = 0; p < 6; ++p) {
    std::vector<int32_t> prompt = {1};
    for (uint64_t i = 0; i < 4 + p % 3; ++i) prompt.push_back(static_cast<int32_t>(5 + random_u32(7, 1, p * 16 + i) % 12));
    for (uint64_t g = 0; g < 8; ++g) {
      std::vector<int32_t> seq = prompt;
      const uint32_t len = random_u32(7, 2, p * 8 + g) % 4;
      for (uint32_t j = 0; j < len; ++j) seq.push_back(static_cast<int32_t>(2 + random_u32(7, 3, p * 64 + g * 8 + j) % 2));
      seqs.push_back(seq);
    }
  }
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    PrecisionPolicy policy;
    policy.linear = linear;
    ModelConfig c = model_preset("tiny", 20);
    Transformer model(c, policy);
    model.init_random(5);
    const size_t micro = 16;
    std::vector<Transformer::QkvAmax> want;
    for (size_t m0 = 0; m0 < seqs.size(); m0 += micro) {
      int64_t T = 0;
      for (size_t i = m0; i < m0 + micro; ++i) T = std::max<int64_t>(T, static_cast<int64_t>(seqs[i].size()));
      TokenBatch b = TokenBatch::empty(static_cast<int64_t>(micro), T, pad);
      for (size_t i = m0; i < m0 + micro; ++i) {
        std::copy(seqs[i].begin(), seqs[i].end(), b.tokens.begin() + static_cast<std::ptrdiff_t>((i - m0) * static_cast<size_t>(T)));
        b.lengths[i - m0] = static_cast<int32_t>(seqs[i].size());
      }
      std::vector<float> unused(static_cast<size_t>(b.B * b.T));
      model.forward(b, unused.data());
      const std::vector<Transformer::QkvAmax>& a = model.last_qkv_amax();
      if (want.empty()) want = a;
      auto max_into = [](std::vector<float>& m, const std::vector<float>& x) {
        for (size_t h = 0; h < m.size(); ++h) m[h] = std::max(m[h], x[h]);
      };
      for (size_t l = 0; l < want.size(); ++l) {
        want[l].q = std::max(want[l].q, a[l].q), want[l].k = std::max(want[l].k, a[l].k);
        want[l].v = std::max(want[l].v, a[l].v);
        max_into(want[l].q_heads, a[l].q_heads), max_into(want[l].k_heads, a[l].k_heads);
        max_into(want[l].v_heads, a[l].v_heads);
      }
    }
    for (int64_t max_batch : {int64_t{1}, int64_t{5}, int64_t{16}, int64_t{64}}) {
      const std::vector<Transformer::QkvAmax> got = calibrate_qkv_amax(model, seqs, max_batch, pad);
      ASSERT_EQ(got.size(), want.size());
      EXPECT_TRUE(got == want)  // per head too
          << precision_name(linear) << " max_batch " << max_batch << ": layer 0 q " << got[0].q << " vs " << want[0].q;
      EXPECT_EQ(kv_scales_from_amax(got).size(), static_cast<size_t>(c.n_layers));
      EXPECT_EQ(kv_scales_from_amax(got, KvScaleGranularity::kHead)[0].k_heads.size(), static_cast<size_t>(c.n_kv_heads));
    }
  }
}

TEST(GrpoEndToEnd, Fp8EndToEndRaisesTheRewardWithExactAgreement) {
  const testing::TempDir tmp;
  const fs::path run = tmp / "e2e";
  ConfigSchema schema;
  RunConfig config;
  const GrpoJobResult result = run_grpo_job(config, load(config, schema, "grpo-fp8-e2e.yaml", grpo_overrides(run, 30, 32)), false);
  ASSERT_EQ(result.steps, 30);
  const auto m = read_metrics(run, true);
  ASSERT_EQ(m.size(), 30u);
  double first = 0, last = 0;
  for (int i = 0; i < 6; ++i) first += m[static_cast<size_t>(i)]["reward_mean"].get<double>() / 6;
  for (int i = 24; i < 30; ++i) last += m[static_cast<size_t>(i)]["reward_mean"].get<double>() / 6;
  EXPECT_GT(last, first) << "mean reward of the first 5 steps " << first << ", of the last 5 " << last;
  for (const auto& line : m) {
    // FP8 linears on both sides from the same bytes, BF16 KV: the log-probs agree exactly.
    EXPECT_LT(line["token_mult_prob_error"].get<double>(), 1.01);
    EXPECT_EQ(line["token_mult_prob_error"].get<double>(), 1.0);
  }
  std::printf("GRPO fp8-e2e tiny: reward %.3f -> %.3f, validation accuracy %.3f -> %.3f\n", first, last,
              result.val_accuracy_before, result.val_accuracy_after);
}

// The same seed gives the same metrics, also with activation checkpointing, every phase's memory
// released between phases and the AdamW moments offloaded; a resumed run equals an uninterrupted
// one (its checkpoint written from, and read back into, offloaded moments).
TEST(GrpoEndToEnd, SameSeedSameMetricsAndResumeMatchesAnUninterruptedRun) {
  const testing::TempDir tmp;
  const fs::path a = tmp / "a", b = tmp / "b", c = tmp / "c";
  {
    ConfigSchema s;
    RunConfig cfg;
    run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e-kv.yaml", grpo_overrides(a, 4)), false);
  }
  {  // the same run with every phase's memory released, per-layer recomputation and offloaded
     // moments: the same bits
    ConfigSchema s;
    RunConfig cfg;
    std::vector<std::string> o = grpo_overrides(b, 4);
    o.insert(o.end(), {"policy.release_memory_between_phases=true", "policy.activation_checkpointing=true",
                       "policy.optimizer.offload_moments=true"});
    run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e-kv.yaml", o), false);
  }
  EXPECT_EQ(read_metrics(a, true), read_metrics(b, true));
  std::vector<std::string> offloaded = grpo_overrides(c, 4);
  offloaded.push_back("policy.optimizer.offload_moments=true");
  {  // interrupted after 2 steps, then resumed to 4
    ConfigSchema s;
    RunConfig cfg;
    run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e-kv.yaml", offloaded), false, /*stop_after=*/2);
  }
  {
    ConfigSchema s;
    RunConfig cfg;
    run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e-kv.yaml", offloaded), true);
  }
  EXPECT_EQ(read_metrics(a, true), read_metrics(c, true));
}

// Qwen3-MoE (tiny-moe) from a short SFT: GRPO bf16 and fp8-e2e agree exactly at every step (the
// generator routes every token to the trainer's experts: routing_mismatch 0), and activation
// checkpointing with every phase's memory released gives the same metrics to the bit (the MoE
// layers' recomputation). Router replay changes no bit where every forward runs the generator's
// weights (one optimizer step per GRPO step, no KL reference: it replays the experts the trainer
// chooses anyway; after an optimizer step, or in a reference of other weights, it takes the
// generator's experts where the trainer's router would choose others). fp8-gen's generator routes
// some decisions differently, and with router replay the trainer takes the generator's experts. A
// frozen router with the load-balancing loss leaves the routers as they were.
TEST(GrpoEndToEnd, MoeAgreesExactlyAndCheckpointingGivesTheSameBits) {
  const testing::TempDir tmp;
  std::vector<std::string> task = kEasyTask;
  task[0] = "model.preset=tiny-moe";
  {
    ConfigSchema s;
    RunConfig cfg;
    std::vector<std::string> o = task;
    o.insert(o.end(), {"logger.log_dir=" + (tmp / "sft").string(), "sft.max_num_steps=20", "sft.val_period=0",
                       "policy.optimizer.lr=0.005", "policy.train_global_batch_size=64"});
    run_sft_job(cfg, load(cfg, s, "sft-arithmetic.yaml", o));
  }
  for (const char* recipe : {"grpo-bf16.yaml", "grpo-fp8-e2e.yaml"}) {
    SCOPED_TRACE(recipe);
    std::vector<std::vector<nlohmann::json>> metrics;
    const std::vector<std::string> one_step = {"policy.train_global_batch_size=64",
                                               "loss_fn.reference_policy_kl_penalty=0"};
    const std::vector<std::pair<const char*, std::vector<std::string>>> variants = {
        {"plain", {}},
        {"checkpointing", {"policy.release_memory_between_phases=true", "policy.activation_checkpointing=true"}},
        {"one-step", one_step},
        {"one-step-replay", {one_step[0], one_step[1], "policy.router_replay=true"}}};
    for (const auto& [variant, extra] : variants) {
      const fs::path run = tmp / (std::string(recipe) + "-" + variant);
      std::vector<std::string> o = task;
      o.insert(o.end(), {"model.checkpoint=" + (tmp / "sft" / "checkpoint").string(), "logger.log_dir=" + run.string(),
                         "grpo.max_num_steps=3", "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=8",
                         "policy.train_global_batch_size=32", "policy.train_micro_batch_size=16", "grpo.val_period=0"});
      o.insert(o.end(), extra.begin(), extra.end());
      ConfigSchema s;
      RunConfig cfg;
      ASSERT_EQ(run_grpo_job(cfg, load(cfg, s, recipe, o), false).steps, 3);
      metrics.push_back(read_metrics(run, true));
    }
    for (const auto& line : metrics[0]) {
      EXPECT_EQ(line["token_mult_prob_error"].get<double>(), 1.0);
      EXPECT_EQ(line["routing_mismatch"].get<double>(), 0.0);
    }
    EXPECT_EQ(metrics[0], metrics[1]);
    EXPECT_EQ(metrics[2], metrics[3]);
  }
  // FP8 generation under a BF16 trainer rounds the router's input differently: the log-probs
  // differ, and near-ties of the router may choose other experts (routing_mismatch, printed). With
  // replay the trainer takes the generator's experts; routing_mismatch still counts the decisions
  // its router would have made otherwise.
  for (bool replay : {false, true}) {
    const fs::path run = tmp / (replay ? "fp8-gen-replay" : "fp8-gen");
    std::vector<std::string> o = task;
    o.insert(o.end(), {"model.checkpoint=" + (tmp / "sft" / "checkpoint").string(), "logger.log_dir=" + run.string(),
                       "grpo.max_num_steps=2", "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=8",
                       "policy.train_global_batch_size=64", "policy.train_micro_batch_size=16", "grpo.val_period=0"});
    if (replay) o.push_back("policy.router_replay=true");
    ConfigSchema s;
    RunConfig cfg;
    ASSERT_EQ(run_grpo_job(cfg, load(cfg, s, "grpo-fp8-gen.yaml", o), false).steps, 2);
    for (const auto& line : read_metrics(run, true)) {
      EXPECT_GT(line["token_mult_prob_error"].get<double>(), 1.0);
      EXPECT_LT(line["routing_mismatch"].get<double>(), 0.5);
      std::printf("MoE fp8-gen%s: token_mult_prob_error %.5f, routing_mismatch %.5f\n", replay ? " replay" : "",
                  line["token_mult_prob_error"].get<double>(), line["routing_mismatch"].get<double>());
    }
  }
  // A frozen router with the load-balancing loss: the routers' weights leave training as they came
  // (checkpoint to checkpoint), the rest moves, and moe_aux_loss is reported (k = 2 when uniform).
  {
    const fs::path run = tmp / "frozen-router-aux";
    std::vector<std::string> o = task;
    o.insert(o.end(), {"model.checkpoint=" + (tmp / "sft" / "checkpoint").string(), "logger.log_dir=" + run.string(),
                       "grpo.max_num_steps=2", "grpo.num_prompts_per_step=8", "grpo.num_generations_per_prompt=8",
                       "policy.train_global_batch_size=32", "policy.train_micro_batch_size=16", "grpo.val_period=0",
                       "policy.freeze_router=true", "policy.aux_loss_coef=0.01"});
    ConfigSchema s;
    RunConfig cfg;
    ASSERT_EQ(run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e.yaml", o), false).steps, 2);
    for (const auto& line : read_metrics(run, true)) {
      EXPECT_GT(line["moe_aux_loss"].get<double>(), 2.0);
      EXPECT_LT(line["moe_aux_loss"].get<double>(), 8.0);
    }
    std::vector<Transformer> models;
    for (const fs::path& dir : {tmp / "sft" / "checkpoint", run / "checkpoint"}) {
      models.emplace_back(load_model_config(dir), PrecisionPolicy{});
      load_model_weights(dir, models.back());
    }
    for (const ParamInfo& t : models[0].layout().tensors()) {
      const std::vector<float> before(models[0].params() + t.offset, models[0].params() + t.offset + t.shape.numel());
      const std::vector<float> after(models[1].params() + t.offset, models[1].params() + t.offset + t.shape.numel());
      if (t.name.ends_with(".mlp.gate.weight")) {
        EXPECT_EQ(before, after) << t.name;
      } else if (t.name.ends_with(".mlp.experts.0.up_proj.weight")) {
        EXPECT_NE(before, after) << t.name;
      }
    }
  }
  // The MoE options on a dense model are refused by name.
  for (const char* option : {"policy.router_replay=true", "policy.freeze_router=true", "policy.aux_loss_coef=0.01"}) {
    ConfigSchema s;
    RunConfig cfg;
    std::vector<std::string> o = grpo_overrides(tmp / "dense-moe-option", 1);
    o.push_back(option);
    const std::string key = std::string(option).substr(0, std::string(option).find('='));
    EXPECT_THAT([&] { run_grpo_job(cfg, load(cfg, s, "grpo-bf16.yaml", o), false); },
                ::testing::ThrowsMessage<Error>(::testing::AllOf(
                    ::testing::HasSubstr(key), ::testing::HasSubstr("needs a Mixture-of-Experts model"))))
        << option;
  }
}

// Per-head KV scales and the next step's prompts in the calibration: the scales reach metrics and
// the checkpoint ([q, k, v, q_heads, k_heads, v_heads] per layer) and a resumed run equals an
// uninterrupted one. A KV budget of 8 pages makes rollouts wait (kv_waited) without changing any
// other metric: nothing is truncated.
TEST(GrpoEndToEnd, PerHeadScalesResumeAndATinyKvBudgetOnlyMakesRolloutsWait) {
  const testing::TempDir tmp;
  const fs::path a = tmp / "head_a", c = tmp / "head_c", d = tmp / "head_d";
  auto run = [&](const fs::path& dir, std::vector<std::string> extra, bool resume, int64_t stop_after) {
    ConfigSchema s;
    RunConfig cfg;
    std::vector<std::string> o = grpo_overrides(dir, 3);
    o.insert(o.end(), {"generation.kv_scale_granularity=head", "generation.kv_calibration_data=batch_and_next_prompts"});
    o.insert(o.end(), extra.begin(), extra.end());
    run_grpo_job(cfg, load(cfg, s, "grpo-fp8-e2e-kv.yaml", o), resume, stop_after);
  };
  run(a, {}, false, 0);
  run(c, {}, false, 2);
  run(c, {}, true, 0);
  run(d, {"generation.kv_cache_bytes=16384"}, false, 0);  // tiny: 128 bytes per token, 8 pages
  const std::vector<nlohmann::json> ma = read_metrics(a, true), md = read_metrics(d, true);
  EXPECT_EQ(ma, read_metrics(c, true));
  ASSERT_EQ(ma.size(), 3u);
  ASSERT_EQ(md.size(), 3u);
  for (size_t i = 0; i < ma.size(); ++i) {
    EXPECT_EQ(ma[i]["kv_scales"][0].size(), 6u);
    EXPECT_EQ(ma[i]["kv_scales"][0][4].size(), 2u);  // tiny: 2 KV heads
    EXPECT_EQ(ma[i]["kv_waited"].get<int64_t>(), 0);
    EXPECT_GT(md[i]["kv_waited"].get<int64_t>(), 0);
    nlohmann::json x = ma[i], y = md[i];
    x.erase("kv_waited"), y.erase("kv_waited");
    EXPECT_EQ(x, y) << "step " << i + 1;
  }
}

TEST(GrpoEndToEnd, BadInputsGiveOneClearErrorAndNoRunDirectory) {
  const testing::TempDir tmp;
  const fs::path run = tmp / "bad";
  auto error_of = [&](const std::string& recipe, std::vector<std::string> extra) {
    ConfigSchema s;
    RunConfig cfg;
    std::vector<std::string> o = grpo_overrides(run, 2);
    o.insert(o.end(), extra.begin(), extra.end());
    try {
      run_grpo_job(cfg, load(cfg, s, recipe, o), false);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(no error)");
  };
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"model.checkpoint=/nonexistent/ckpt"}),
              ::testing::HasSubstr("model directory '/nonexistent/ckpt' does not exist"));
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"loss_fn.use_importance_sampling_correction=false"}),
              ::testing::HasSubstr("needs loss_fn.use_importance_sampling_correction: true"));
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"grpo.max_num_step=3"}), ::testing::HasSubstr("did you mean 'grpo.max_num_steps'"));
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"policy.train_global_batch_size=48"}),
              ::testing::HasSubstr("must divide grpo.num_prompts_per_step"));
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"policy.fp8_kv_attention=true"}),
              ::testing::HasSubstr("policy.fp8_kv_attention: true needs generation.kv_cache_dtype: fp8"));
  EXPECT_THAT(error_of("grpo-fp8-e2e-kv.yaml", {"generation.kv_scale_granularity=channel"}),
              ::testing::HasSubstr("expects one of 'layer', 'head'"));
  const fs::path dataset = tmp / "bad.jsonl";
  std::ofstream(dataset) << "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\nnot json\n";
  EXPECT_THAT(error_of("grpo-fp8-e2e.yaml", {"task.name=jsonl", "task.jsonl.train_path=" + dataset.string(),
                                             "task.jsonl.validation_path=" + dataset.string()}),
              ::testing::HasSubstr("line 2: not valid JSON"));
  EXPECT_FALSE(fs::exists(run)) << "a failed start must not leave a run directory";
  const fs::path broken = tmp / "broken.yaml";
  std::ofstream(broken) << "grpo:\n  max_num_steps: [1, 2\n";
  ConfigSchema s;
  RunConfig cfg;
  bind_run_config(s, cfg);
  EXPECT_THROW(s.load(broken, {}), Error);
}

}  // namespace
}  // namespace fp8rl
