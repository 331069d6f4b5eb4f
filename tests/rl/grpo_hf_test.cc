// GRPO from a Hugging Face model directory, end to end: a Llama checkpoint written by the
// independent PyTorch reference (tools/oracles/hf_reference.py) with a byte-level tokenizer.json,
// a GSM8K-style JSONL task with its own field names, fp8-e2e training; the run writes a checkpoint,
// a BF16 Hugging Face directory and an FP8 export, each a complete model directory (config.json
// keys of the source kept, tokenizer files copied), and both exports load back with the
// checkpoint's log-probs to the bit.
// ctest-file-label: slow-oracle
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/rng.h"
#include "io/safetensors.h"
#include "model/checkpoint.h"
#include "jobs/grpo.h"
#include "tests/tasks/byte_level_toy.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

std::vector<float> logprobs_of(const fs::path& dir, const PrecisionPolicy& policy, const TokenBatch& batch) {
  Transformer model(load_model_config(dir), policy);
  load_model_weights(dir, model);
  std::vector<float> lp(static_cast<size_t>(batch.B * batch.T));
  model.forward(batch, lp.data(), /*for_backward=*/false);
  return lp;
}

TEST(GrpoFromHfDirectory, WritesAHfDirectoryAndAnFp8ExportThatLoadBackWithTheSameLogprobs) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  const fs::path model_dir = tmp / "llama", run = tmp / "run";
  const std::string make = "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/hf_reference.py make-checkpoint " +
                           model_dir.string() + " --arch llama --dtype bf16 --shards 2 --vocab 300 --max-pos 128";
  ASSERT_EQ(std::system(make.c_str()), 0) << make;
  tmp.write("llama/tokenizer.json", testing::byte_level_tokenizer_json(testing::llama3_specials()));
  std::string lines;
  for (int a = 1; a <= 8; ++a)
    lines += "{\"question\": \"" + std::to_string(a) + "+1=\", \"answer\": \"" + std::to_string(a) + "+1=" +
             std::to_string(a + 1) + "\\n#### " + std::to_string(a + 1) + "\"}\n";
  const fs::path data = tmp.write("gsm.jsonl", lines);

  ConfigSchema schema;
  RunConfig config;
  bind_run_config(schema, config);
  schema.load(fs::path(FP8RL_SOURCE_DIR) / "recipes" / "grpo-fp8-e2e.yaml",
              {"model.checkpoint=null", "model.name=" + model_dir.string(), "task.name=jsonl",
               "task.jsonl.train_path=" + data.string(), "task.jsonl.validation_path=" + data.string(),
               "task.jsonl.prompt_key=question", "logger.log_dir=" + run.string(), "grpo.max_num_steps=2",
               "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=4", "policy.train_global_batch_size=8",
               "policy.train_micro_batch_size=8", "generation.max_new_tokens=4", "eval.max_examples=4",
               "grpo.val_period=0", "checkpointing.export_hf=true", "checkpointing.export_fp8=true"});
  const GrpoJobResult result = run_grpo_job(config, schema.to_yaml(), /*resume=*/false, /*stop_after=*/0);
  EXPECT_EQ(result.steps, 2);

  // The generator and the trainer agree exactly (fp8-e2e: one set of FP8 bytes).
  std::ifstream metrics(run / "metrics.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(metrics, line)) {
    ++steps;
    EXPECT_EQ(nlohmann::json::parse(line).at("token_mult_prob_error").get<double>(), 1.0) << line;
  }
  EXPECT_EQ(steps, 2);

  // Every output is a complete model directory.
  for (const char* out : {"checkpoint", "hf", "hf-fp8"}) {
    const fs::path dir = run / out;
    EXPECT_TRUE(fs::exists(dir / "tokenizer.json")) << out;
    const nlohmann::json cfg = read_json_file(dir / "config.json");
    EXPECT_EQ(cfg.at("bos_token_id"), 1) << out << ": the source's config.json keys are kept";
    EXPECT_EQ(cfg.at("architectures"), nlohmann::json({"LlamaForCausalLM"})) << out;
  }
  EXPECT_EQ(read_json_file(run / "hf-fp8" / "config.json").at("quantization_config").at("quant_method"), "fp8");

  // Log-probs of the trained policy, from the checkpoint and from each export.
  TokenBatch batch = TokenBatch::empty(2, 12, 0);
  RandomStream rng(3, 0);
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    batch.tokens[i] = static_cast<int32_t>(rng.next_below(263));
    if (i % 12 != 11) batch.targets[i] = static_cast<int32_t>(rng.next_below(263));
  }
  batch.lengths = {12, 12};
  const PrecisionPolicy fp8 = config.trainer_policy();
  PrecisionPolicy bf16 = fp8;
  bf16.linear = Precision::kBF16;
  const std::vector<float> ckpt_fp8 = logprobs_of(run / "checkpoint", fp8, batch);
  const std::vector<float> export_fp8 = logprobs_of(run / "hf-fp8", fp8, batch);
  const std::vector<float> ckpt_bf16 = logprobs_of(run / "checkpoint", bf16, batch);
  const std::vector<float> export_bf16 = logprobs_of(run / "hf", bf16, batch);
  EXPECT_EQ(0, std::memcmp(ckpt_fp8.data(), export_fp8.data(), ckpt_fp8.size() * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(ckpt_bf16.data(), export_bf16.data(), ckpt_bf16.size() * sizeof(float)));
  EXPECT_NE(0, std::memcmp(ckpt_fp8.data(), ckpt_bf16.data(), ckpt_fp8.size() * sizeof(float)));
}

}  // namespace
}  // namespace fp8rl
