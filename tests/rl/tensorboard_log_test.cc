// logger.tensorboard_enabled: a GRPO run (interrupted, with an orphaned step and a torn record,
// and resumed) and an SFT run write event files whose scalars are their metrics files' numbers, float32 for float32, read back by our
// reader and by the independent one (tests/io/tfevents_oracle.h) where it is installed; without
// the key no event file is written.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "io/tfevents.h"
#include "jobs/grpo.h"
#include "jobs/sft_job.h"
#include "tests/io/tfevents_oracle.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

// A tiny model from random weights on 1-digit addition: a few seconds per run.
const std::vector<std::string> kTinyRun = {"model.preset=tiny",
                                           "model.checkpoint=null",
                                           "model.max_seq_len=16",
                                           "task.arithmetic.min_operand_digits=1",
                                           "task.arithmetic.max_operand_digits=1",
                                           "task.arithmetic.val_size=8",
                                           "task.arithmetic.train_size=200",
                                           "eval.max_examples=8",
                                           "generation.max_new_tokens=3"};

std::string load(RunConfig& config, const std::string& recipe, std::vector<std::string> overrides) {
  ConfigSchema schema;
  bind_run_config(schema, config);
  schema.load(fs::path(FP8RL_SOURCE_DIR) / "recipes" / recipe, overrides);
  return schema.to_yaml();
}

std::vector<fs::path> event_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().filename().string().starts_with("events.out.tfevents.")) files.push_back(e.path());
  std::sort(files.begin(), files.end());  // TensorBoard's order: by name
  return files;
}

// What the event files should hold: each metrics line's numbers at its step.
std::vector<TfEventsScalar> scalars_of_metrics(const fs::path& jsonl, std::string_view prefix) {
  std::ifstream in(jsonl);
  std::vector<TfEventsScalar> want;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::ordered_json::parse(line);
    for (const auto& [tag, value] : metrics_line_scalars(j, prefix))
      want.push_back({j.at("step").get<int64_t>(), 0, tag, static_cast<float>(value)});
  }
  return want;
}

// Every scalar of the run directory's event files in name order, by `read`.
template <typename Read>
std::vector<TfEventsScalar> scalars_of_run(const fs::path& dir, Read read) {
  std::vector<TfEventsScalar> all;
  for (const fs::path& f : event_files(dir))
    for (TfEventsScalar& s : read(f)) all.push_back(std::move(s));
  return all;
}

void expect_same(const std::vector<TfEventsScalar>& got, const std::vector<TfEventsScalar>& want, const char* reader) {
  ASSERT_EQ(got.size(), want.size()) << reader;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, want[i].step) << reader << " " << i;
    EXPECT_EQ(got[i].tag, want[i].tag) << reader << " " << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i].value), std::bit_cast<uint32_t>(want[i].value))
        << reader << " step " << got[i].step << " " << got[i].tag << ": " << got[i].value << " vs " << want[i].value;
  }
}

void expect_event_files_hold_metrics(const fs::path& dir, const fs::path& jsonl, std::string_view prefix) {
  const std::vector<TfEventsScalar> want = scalars_of_metrics(jsonl, prefix);
  expect_same(scalars_of_run(dir, [](const fs::path& f) { return read_tfevents_scalars(f); }), want, "ours");
  if (const std::string why = testing::tfevents_oracle_missing(); !why.empty()) {
    std::printf("independent reader skipped: %s\n", why.c_str());
    return;
  }
  expect_same(scalars_of_run(dir, [](const fs::path& f) { return testing::read_tfevents_with_oracle(f); }), want,
              "independent");
}

TEST(TensorboardLog, GrpoEventFilesHoldTheMetricsAcrossAResume) {
  testing::TempDir tmp;
  const fs::path run = tmp / "grpo";
  std::vector<std::string> o = kTinyRun;
  o.insert(o.end(), {"logger.log_dir=" + run.string(), "logger.tensorboard_enabled=true", "grpo.max_num_steps=3",
                     "grpo.val_period=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4",
                     "policy.train_global_batch_size=8", "policy.train_micro_batch_size=8"});
  RunConfig config;
  const std::string yaml = load(config, "grpo-fp8-e2e-kv.yaml", o);  // its kv_scales arrays are left out
  run_grpo_job(config, yaml, /*resume=*/false, /*stop_after=*/2);
  ASSERT_EQ(event_files(run).size(), 1u);
  // As if the first invocation had logged step 3 and been killed inside step 4's write: the
  // resumed run drops both, as it drops metrics.jsonl's lines past the checkpoint.
  {
    TfEventsWriter orphan(run);
    orphan.add_scalars(3, 0, {{"reward_mean", 99}});
  }
  std::ofstream(event_files(run).front(), std::ios::app | std::ios::binary) << tfrecord_frame("cut").substr(0, 13);
  run_grpo_job(config, yaml, /*resume=*/true);
  ASSERT_EQ(event_files(run).size(), 3u);  // the resumed invocation opened its own file

  const std::vector<TfEventsScalar> want = scalars_of_metrics(run / "metrics.jsonl", "");
  ASSERT_FALSE(want.empty());
  EXPECT_EQ(want.back().step, 3);
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](const auto& s) { return s.tag == "timing/generation"; }));
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](const auto& s) { return s.tag == "val_accuracy"; }));
  expect_event_files_hold_metrics(run, run / "metrics.jsonl", "");
}

TEST(TensorboardLog, SftEventFileHoldsTheMetricsUnderSft) {
  testing::TempDir tmp;
  std::vector<std::string> o = kTinyRun;
  o.insert(o.end(),
           {"logger.log_dir=" + (tmp / "sft").string(), "logger.tensorboard_enabled=true", "sft.max_num_steps=3",
            "sft.val_period=2", "policy.train_global_batch_size=8", "policy.train_micro_batch_size=8"});
  RunConfig config;
  run_sft_job(config, load(config, "sft-arithmetic.yaml", o));
  ASSERT_EQ(event_files(tmp / "sft").size(), 1u);
  const std::vector<TfEventsScalar> want = scalars_of_metrics(tmp / "sft" / "sft_metrics.jsonl", "sft/");
  EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](const auto& s) { return s.tag == "sft/val_accuracy"; }));
  expect_event_files_hold_metrics(tmp / "sft", tmp / "sft" / "sft_metrics.jsonl", "sft/");
}

TEST(TensorboardLog, OffByDefault) {
  testing::TempDir tmp;
  std::vector<std::string> o = kTinyRun;
  o.insert(o.end(), {"logger.log_dir=" + (tmp / "sft").string(), "sft.max_num_steps=1",
                     "policy.train_global_batch_size=8", "policy.train_micro_batch_size=8"});
  RunConfig config;
  run_sft_job(config, load(config, "sft-arithmetic.yaml", o));
  EXPECT_FALSE(config.tensorboard_enabled);
  EXPECT_TRUE(fs::exists(tmp / "sft" / "sft_metrics.jsonl"));
  EXPECT_TRUE(event_files(tmp / "sft").empty());
}

}  // namespace
}  // namespace fp8rl
