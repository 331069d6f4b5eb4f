// Qwen3-MoE model directories: BF16 and FP8 exports (each expert quantized in its own 128x128
// blocks, the router kept BF16) load back with bit-identical log-probs, into trainable and frozen
// models, and export again to the same bytes; malformed MoE configs and missing expert tensors are
// refused with an error naming the key or tensor; checkpoints written by the independent PyTorch
// reference (tools/oracles/hf_reference.py, float64 Qwen3MoeSparseMoeBlock) give fp8rl's FP32
// model the reference's logits and log-probs.
// ctest-file-label: quick
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/hf_weights.h"
#include "model/transformer.h"
#include "tests/model/hf_reference_client.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

// tiny-moe at width 128 (whole FP8 blocks) with layer 0 dense, so both MLP kinds are exported.
ModelConfig moe_config() {
  ModelConfig c = model_preset("tiny-moe", 50);
  c.d_model = 128, c.d_ff = 256, c.d_expert = 128, c.mlp_only_layers = {0};
  return c;
}

PrecisionPolicy policy_with(Precision linear) {
  PrecisionPolicy p;
  p.linear = linear;
  return p;
}

TokenBatch moe_batch() {
  TokenBatch b = TokenBatch::empty(3, 12, 0);
  RandomStream rng(7, 0);
  for (size_t i = 0; i < b.tokens.size(); ++i) b.tokens[i] = 3 + static_cast<int32_t>(rng.next_below(47));
  for (size_t i = 0; i + 1 < b.tokens.size(); ++i) b.targets[i] = i % 12 == 11 ? -1 : b.tokens[i + 1];
  return b;
}

std::vector<float> logprobs(Transformer& model, const TokenBatch& b) {
  std::vector<float> lp(static_cast<size_t>(b.B * b.T));
  model.forward(b, lp.data(), /*for_backward=*/false);
  return lp;
}

std::string file_bytes(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(MoeHf, Fp8AndBf16ExportsLoadBackToTheBitAndExportAgainToTheSameBytes) {
  testing::TempDir tmp;
  const TokenBatch batch = moe_batch();
  for (Precision linear : {Precision::kBF16, Precision::kFP8}) {
    SCOPED_TRACE(precision_name(linear));
    const PrecisionPolicy policy = policy_with(linear);
    const DType format = linear == Precision::kFP8 ? DType::kE4M3 : DType::kBF16;
    const fs::path dir = tmp / precision_name(linear), again = tmp / (std::string(precision_name(linear)) + "-again");
    Transformer model(moe_config(), policy);
    model.init_random(3);
    // Exported BF16 weights (the router and a BF16 model's linears) round to BF16: start from
    // BF16-valued masters, so that the loaded model is the exported one exactly.
    for (int64_t i = 0; i < model.num_params(); ++i) model.params()[i] = bf16_to_f32(f32_to_bf16(model.params()[i]));
    model.refresh_weights();
    export_hf_model(dir, model, {format, {}, int64_t{1} << 30});

    const nlohmann::json config = read_json_file(dir / "config.json");
    EXPECT_EQ(config.at("model_type"), "qwen3_moe");
    EXPECT_EQ(config.at("architectures"), nlohmann::json({"Qwen3MoeForCausalLM"}));
    EXPECT_EQ(config.at("num_experts"), 8);
    EXPECT_EQ(config.at("num_experts_per_tok"), 2);
    EXPECT_EQ(config.at("moe_intermediate_size"), 128);
    EXPECT_EQ(config.at("mlp_only_layers"), nlohmann::json({0}));
    const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
    const std::string expert = "model.layers.1.mlp.experts.5.down_proj.weight",
                      router = "model.layers.1.mlp.gate.weight";
    EXPECT_EQ(f.info(router).dtype_name, "BF16");
    EXPECT_EQ(f.info(router).shape, (Shape{8, 128}));
    if (linear == Precision::kFP8) {
      EXPECT_EQ(f.info(expert).dtype_name, "F8_E4M3");
      EXPECT_EQ(f.info(expert + "_scale_inv").shape, (Shape{1, 1}));  // its own 128x128 block
      EXPECT_THAT(config.at("quantization_config").at("modules_to_not_convert").get<std::vector<std::string>>(),
                  ::testing::Contains("model.layers.1.mlp.gate"));
    } else {
      EXPECT_EQ(f.info(expert).dtype_name, "BF16");
    }

    const std::vector<float> want = logprobs(model, batch);
    ASSERT_EQ(load_model_config(dir).num_experts, 8);
    Transformer loaded(load_model_config(dir), policy);
    load_model_weights(dir, loaded);
    EXPECT_EQ(logprobs(loaded, batch), want);
    Transformer frozen = load_frozen_model(dir, policy, /*band_rows=*/128);
    EXPECT_EQ(logprobs(frozen, batch), want);
    export_hf_model(again, loaded, {format, {}, int64_t{1} << 30});
    EXPECT_EQ(file_bytes(dir / "model.safetensors"), file_bytes(again / "model.safetensors"));
  }
}

void rewrite_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json_file(dir / "config.json");
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

TEST(MoeHf, MalformedMoeConfigsAndMissingExpertsAreRefusedByName) {
  testing::TempDir tmp;
  Transformer model(moe_config(), PrecisionPolicy{});
  model.init_random(1);
  export_hf_model(tmp / "m", model, {});
  const nlohmann::json good = read_json_file(tmp / "m" / "config.json");
  const struct {
    std::function<void(nlohmann::json&)> edit;
    const char* expected;
  } cases[] = {
      {[](nlohmann::json& j) { j["num_experts_per_tok"] = 9; }, "experts_per_token (num_experts_per_tok)"},
      {[](nlohmann::json& j) { j["num_experts"] = 0; }, "key 'num_experts' is 0"},
      {[](nlohmann::json& j) { j.erase("moe_intermediate_size"); }, "missing key 'moe_intermediate_size'"},
      {[](nlohmann::json& j) { j["mlp_only_layers"] = {5}; }, "mlp_only_layers has 5"},
      {[](nlohmann::json& j) { j["mlp_only_layers"] = "0"; }, "'mlp_only_layers' must be a list"},
      {[](nlohmann::json& j) { j["shared_expert_intermediate_size"] = 64; }, "'shared_expert_intermediate_size'"},
      {[](nlohmann::json& j) { j["model_type"] = "qwen3", j["architectures"] = {"Qwen3ForCausalLM"}; },
       "key 'num_experts' describes experts"},
      {[](nlohmann::json& j) { j["architectures"] = {"Qwen3ForCausalLM"}; }, "expected Qwen3MoeForCausalLM"},
  };
  for (const auto& c : cases) {
    rewrite_config(tmp / "m", [&](nlohmann::json& j) {
      j = good;
      c.edit(j);
    });
    EXPECT_THAT(testing::error_message([&] { load_model_config(tmp / "m"); }), HasSubstr(c.expected));
  }
  // An expert's tensor missing from the weights: named, and nothing loaded.
  rewrite_config(tmp / "m", [&](nlohmann::json& j) { j = good; });
  {
    const SafetensorsFile f = SafetensorsFile::open(tmp / "m" / "model.safetensors");
    SafetensorsWriter w;
    std::vector<Tensor> kept;
    kept.reserve(f.names().size());  // the writer keeps views into these
    for (const std::string& name : f.names())
      if (name != "model.layers.1.mlp.experts.3.up_proj.weight")
        kept.push_back(f.read(name)), w.add(name, kept.back().view());
    w.write(tmp / "m" / "model.safetensors");
  }
  Transformer target(moe_config(), PrecisionPolicy{});
  EXPECT_THAT(testing::error_message([&] { load_model_weights(tmp / "m", target); }),
              HasSubstr("model.layers.1.mlp.experts.3.up_proj.weight"));
}

// ---- against the PyTorch reference (helpers as in hf_model_test.cc) ----------------------------

using testing::compare;
using testing::MaxError;
using testing::random_batch;
using testing::reference_outputs;
using testing::run_reference;
using testing::write_batch;

// FP32 against float64 from the same stored values, as in hf_model_test.cc: the differences stay
// near 1e-6. A token sent to another expert, or with other weights, moves its logits by about 1e-2
// in these models, so the bound also checks the routing.
constexpr double kTolerance = testing::kReferenceTolerance;
// fp8rl's router logits are the reference's to about 1e-6, so its probabilities to about 1e-6
// relative: a token whose k-th and (k+1)-th probabilities are closer than this (relative) could
// go to another expert in fp8rl. These seeds' closest is about 1e-2.
constexpr double kMinRouteMargin = 1e-4;

// ctest-label: slow-oracle
TEST(MoeHf, LoadsMoeDirectoriesLikeThePyTorchReference) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  struct Variant {
    const char* name;
    const char* args;
  };
  const Variant variants[] = {
      // Layer 0 dense (mlp_only_layers), layer 1 MoE: top 2 of 8, renormalized.
      {"qwen3_moe_bf16_norm_topk_sharded",
       "--arch qwen3_moe --dtype bf16 --norm-topk 1 --mlp-only-layers 0 --shards 2 --seed 4"},
      // Layers 1 and 3 MoE (decoder_sparse_step 2): top 3 of 6, the raw probabilities.
      {"qwen3_moe_f32_raw_topk_step2",
       "--arch qwen3_moe --dtype f32 --norm-topk 0 --experts 6 --top-k 3 --sparse-step 2 --layers 4 --seed 5"},
  };
  TokenBatch batch = random_batch(300, {40, 23, 9}, 40, 7);
  write_batch(tmp / "batch.safetensors", batch);
  std::string commands;
  for (const Variant& v : variants)
    commands += fmt::format("make-checkpoint {0}/{1} {2} ';' logprobs {0}/{1} {0}/batch.safetensors {0}/{1}.out ';' ",
                            tmp.path().string(), v.name, v.args);
  run_reference(commands);
  for (const Variant& v : variants) {
    const fs::path dir = tmp / v.name;
    ASSERT_TRUE(load_model_config(dir).is_moe()) << v.name;
    const MaxError e =
        compare(testing::fp8rl_forward(dir, PrecisionPolicy::fp32(), batch), reference_outputs(tmp / (std::string(v.name) + ".out")), batch, 300);
    EXPECT_GT(e.margin, kMinRouteMargin) << v.name << ": a near tie in the routing; choose another --seed";
    EXPECT_LT(e.logits, kTolerance) << v.name;
    EXPECT_LT(e.logprobs, kTolerance) << v.name;
    std::printf(
        "[ measured ] %s: max |logit error| %.2e, max |log-prob error| %.2e (bound %.0e), "
        "smallest router margin %.1e\n",
        v.name, e.logits, e.logprobs, kTolerance, e.margin);
  }
}

}  // namespace
}  // namespace fp8rl
