// Hugging Face model directories against an independent PyTorch reference
// (tools/oracles/hf_reference.py: float64, written from transformers' published Llama / Qwen3
// semantics, with its own safetensors reader and writer):
//   * checkpoints the reference writes in the HF layout (sharded or not, BF16 / F16 / F32, tied and
//     untied embeddings, Llama-3 rope scaling, Qwen3 q/k norm, GQA) give fp8rl's FP32 model the
//     reference's logits and log-probs;
//   * fp8rl's BF16 and FP8 exports load back into fp8rl with bit-identical log-probs, and the
//     reference reads the FP8 export (E4M3 codes x weight_scale_inv) to the same log-probs;
//   * malformed directories give one error naming the file and the tensor, and load nothing.
// ctest-file-label: slow-oracle
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/check.h"
#include "core/rng.h"
#include "io/safetensors.h"
#include "tests/model/hf_reference_client.h"
#include "tests/test_temp_dir.h"
#include "model/checkpoint.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

using testing::compare;
using testing::fp8rl_forward;
using testing::MaxError;
using testing::Outputs;
using testing::random_batch;
using testing::reference_outputs;
using testing::run_reference;
using testing::write_batch;
constexpr double kTolerance = testing::kReferenceTolerance;

TEST(HfModel, LoadsHfDirectoriesLikeThePyTorchReference) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  struct Variant {
    const char* name;
    const char* args;
  };
  const Variant variants[] = {
      {"llama_bf16_sharded_rope_scaling", "--arch llama --dtype bf16 --shards 3 --rope-scaling 1 --seed 1"},
      {"qwen3_f16_tied", "--arch qwen3 --dtype f16 --tie 1 --seed 2"},
      {"llama_f32_gqa4", "--arch llama --dtype f32 --heads 4 --kv-heads 1 --head-dim 32 --seed 3"},
      {"qwen2_bf16_tied", "--arch qwen2 --dtype bf16 --tie 1 --seed 4"},
  };
  TokenBatch batch = random_batch(300, {40, 23, 9}, 40, 7);  // positions past rope scaling's 64? no: 0..39
  write_batch(tmp / "batch.safetensors", batch);
  std::string commands;
  for (const Variant& v : variants)
    commands += fmt::format("make-checkpoint {0}/{1} {2} ';' logprobs {0}/{1} {0}/batch.safetensors {0}/{1}.out ';' ",
                            tmp.path().string(), v.name, v.args);
  run_reference(commands);
  for (const Variant& v : variants) {
    const fs::path dir = tmp / v.name;
    const Outputs got = fp8rl_forward(dir, PrecisionPolicy::fp32(), batch);
    const MaxError e = compare(got, reference_outputs(tmp / (std::string(v.name) + ".out")), batch, 300);
    EXPECT_LT(e.logits, kTolerance) << v.name;
    EXPECT_LT(e.logprobs, kTolerance) << v.name;
    std::printf("[ measured ] %s: max |logit error| %.2e, max |log-prob error| %.2e (bound %.0e)\n", v.name, e.logits,
                e.logprobs, kTolerance);
  }
}

// A Qwen3-style model whose linears have partial 128x128 blocks (192 = 1.5 blocks), layer 0 in
// BF16 and the rest in FP8.
ModelConfig export_config() {
  ModelConfig c;
  c.vocab_size = 300, c.d_model = 192, c.n_layers = 2, c.n_heads = 3, c.n_kv_heads = 1, c.head_dim = 64;
  c.d_ff = 320, c.max_seq_len = 64, c.qk_norm = true, c.tie_embeddings = false;
  return c;
}
PrecisionPolicy fp8_policy() {
  PrecisionPolicy p;
  p.linear = Precision::kFP8;
  p.num_first_layers_in_bf16 = 1;
  return p;
}

TEST(HfModel, Fp8AndBf16ExportsLoadBackWithBitIdenticalLogprobs) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  TokenBatch batch = random_batch(300, {30, 17, 5}, 30, 11);
  write_batch(tmp / "batch.safetensors", batch);
  Transformer fp8(export_config(), fp8_policy());
  fp8.init_random(5);
  export_hf_model(tmp / "fp8", fp8, {DType::kE4M3, {}, /*max_shard_bytes=*/100 << 10});
  PrecisionPolicy bf16_policy;
  Transformer bf16(export_config(), bf16_policy);
  std::copy(fp8.params(), fp8.params() + fp8.num_params(), bf16.params());
  bf16.refresh_weights();
  export_hf_model(tmp / "bf16", bf16, {});

  // The FP8 export: E4M3 codes and block scales of every FP8 linear, BF16 elsewhere, sharded.
  const nlohmann::json config = read_json_file(tmp / "fp8" / "config.json");
  const nlohmann::json& q = config.at("quantization_config");
  EXPECT_EQ(q.at("quant_method"), "fp8");
  EXPECT_EQ(q.at("fmt"), "e4m3");
  EXPECT_EQ(q.at("activation_scheme"), "dynamic");
  EXPECT_EQ(q.at("weight_block_size"), nlohmann::json({128, 128}));
  EXPECT_THAT(q.at("modules_to_not_convert").get<std::vector<std::string>>(),
              ::testing::Contains("model.layers.0.self_attn.q_proj"));
  EXPECT_THAT(q.at("ignored_layers").get<std::vector<std::string>>(), ::testing::Contains("lm_head"));
  ASSERT_TRUE(fs::exists(tmp / "fp8" / "model.safetensors.index.json"));
  const nlohmann::json index = read_json_file(tmp / "fp8" / "model.safetensors.index.json");
  const std::string up = "model.layers.1.mlp.up_proj.weight";
  const SafetensorsFile shard = SafetensorsFile::open(tmp / "fp8" / index.at("weight_map").at(up).get<std::string>());
  EXPECT_EQ(shard.info(up).dtype_name, "F8_E4M3");
  EXPECT_EQ(shard.info(up + "_scale_inv").shape, (Shape{3, 2}));  // ceil(320/128) x ceil(192/128)
  const SafetensorsFile single = SafetensorsFile::open(tmp / "bf16" / "model.safetensors");
  EXPECT_EQ(single.info(up).dtype_name, "BF16");
  EXPECT_EQ(single.info("model.norm.weight").dtype_name, "F32");
  EXPECT_FALSE(read_json_file(tmp / "bf16" / "config.json").contains("quantization_config"));

  // Loaded back: the same bytes in the linears, the same log-probs to the bit.
  const Outputs before_fp8 = fp8rl_forward(fp8, batch), before_bf16 = fp8rl_forward(bf16, batch);
  const Outputs after_fp8 = fp8rl_forward(tmp / "fp8", fp8_policy(), batch);
  const Outputs after_bf16 = fp8rl_forward(tmp / "bf16", bf16_policy, batch);
  EXPECT_EQ(0, std::memcmp(before_fp8.logprobs.data(), after_fp8.logprobs.data(), before_fp8.logprobs.size() * 4));
  EXPECT_EQ(0, std::memcmp(before_bf16.logprobs.data(), after_bf16.logprobs.data(), before_bf16.logprobs.size() * 4));
  // Streamed into frozen models (128-row bands: the 300-row embedding and 320-row MLP matrices in
  // several pieces, FP8 blocks quantized band by band): the same log-probs again, from the FP8
  // export's stored bytes, and from the BF16 export quantized on the way in.
  Transformer trainable_from_bf16(export_config(), fp8_policy());
  load_model_weights(tmp / "bf16", trainable_from_bf16);
  const Outputs want_quantized = fp8rl_forward(trainable_from_bf16, batch);
  const struct {
    const char* dir;
    PrecisionPolicy policy;
    const Outputs& want;
  } frozen_cases[] = {{"fp8", fp8_policy(), before_fp8}, {"bf16", bf16_policy, before_bf16}, {"bf16", fp8_policy(), want_quantized}};
  for (const auto& f : frozen_cases) {
    Transformer frozen = load_frozen_model(tmp / f.dir, f.policy, /*band_rows=*/128);
    std::vector<float> lp(static_cast<size_t>(batch.B * batch.T));
    frozen.forward(batch, lp.data());
    EXPECT_EQ(0, std::memcmp(lp.data(), f.want.logprobs.data(), lp.size() * 4)) << "frozen from " << f.dir;
  }

  // The reference reads the FP8 export as fp8rl's FP32 model does.
  run_reference(fmt::format("logprobs {0}/fp8 {0}/batch.safetensors {0}/fp8.out", tmp.path().string()));
  const MaxError e =
      compare(fp8rl_forward(tmp / "fp8", PrecisionPolicy::fp32(), batch), reference_outputs(tmp / "fp8.out"), batch, 300);
  EXPECT_LT(e.logits, kTolerance);
  EXPECT_LT(e.logprobs, kTolerance);
  std::printf("[ measured ] FP8 export read by the reference: max |logit error| %.2e, max |log-prob error| %.2e\n",
              e.logits, e.logprobs);
}

// Qwen2 (biases on q, k and v) through both exports and back: config.json names the family, the
// biases are stored, and the log-probs come back to the bit (trainable and frozen, FP8 and BF16);
// the reference reads the FP8 export as fp8rl's FP32 model does.
TEST(HfModel, Qwen2ExportsLoadBackWithBitIdenticalLogprobs) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  TokenBatch batch = random_batch(300, {30, 17, 5}, 30, 12);
  write_batch(tmp / "batch.safetensors", batch);
  ModelConfig c = export_config();
  c.qk_norm = false, c.qkv_bias = true;
  Transformer fp8(c, fp8_policy());
  fp8.init_random(6);
  for (const ParamInfo& p : fp8.layout().tensors())
    if (is_bias(p.role)) fill_uniform(fp8.params() + p.offset, p.shape.numel(), -0.5f, 0.5f, 7, static_cast<uint64_t>(p.offset));
  fp8.refresh_weights();
  export_hf_model(tmp / "fp8", fp8, {DType::kE4M3, {}, /*max_shard_bytes=*/100 << 10});
  export_hf_model(tmp / "bf16", fp8, {});
  const nlohmann::json config = read_json_file(tmp / "fp8" / "config.json");
  EXPECT_EQ(config.at("model_type"), "qwen2");
  EXPECT_EQ(config.at("architectures"), nlohmann::json({"Qwen2ForCausalLM"}));
  EXPECT_FALSE(config.contains("attention_bias"));
  const SafetensorsFile single = SafetensorsFile::open(tmp / "bf16" / "model.safetensors");
  EXPECT_EQ(single.info("model.layers.1.self_attn.k_proj.bias").shape, (Shape{c.kv_dim()}));
  EXPECT_EQ(load_model_config(tmp / "bf16").qkv_bias, true);

  const Outputs before = fp8rl_forward(fp8, batch);
  const Outputs after = fp8rl_forward(tmp / "fp8", fp8_policy(), batch);
  EXPECT_EQ(0, std::memcmp(before.logprobs.data(), after.logprobs.data(), before.logprobs.size() * 4));
  Transformer frozen = load_frozen_model(tmp / "fp8", fp8_policy(), /*band_rows=*/128);
  std::vector<float> lp(static_cast<size_t>(batch.B * batch.T));
  frozen.forward(batch, lp.data());
  EXPECT_EQ(0, std::memcmp(lp.data(), before.logprobs.data(), lp.size() * 4)) << "frozen from the FP8 export";
  Transformer reference = fp8.frozen_copy();  // the reference policy of a Qwen2 run
  std::vector<float> lp_ref(lp.size());
  reference.forward(batch, lp_ref.data());
  EXPECT_EQ(0, std::memcmp(lp_ref.data(), before.logprobs.data(), lp.size() * 4)) << "frozen_copy";

  run_reference(fmt::format("logprobs {0}/fp8 {0}/batch.safetensors {0}/fp8.out", tmp.path().string()));
  const MaxError e =
      compare(fp8rl_forward(tmp / "fp8", PrecisionPolicy::fp32(), batch), reference_outputs(tmp / "fp8.out"), batch, 300);
  EXPECT_LT(e.logits, kTolerance);
  EXPECT_LT(e.logprobs, kTolerance);
  std::printf("[ measured ] Qwen2 FP8 export read by the reference: max |logit error| %.2e, max |log-prob error| %.2e\n",
              e.logits, e.logprobs);
}

// ---- malformed directories ---------------------------------------------------------------------

std::string load_error(const fs::path& dir, Transformer& model) {
  try {
    load_model_weights(dir, model);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

std::string config_error(const fs::path& dir) {
  try {
    load_model_config(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

void rewrite_config(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = read_json_file(dir / "config.json");
  edit(j);
  std::ofstream(dir / "config.json") << j.dump();
}

// Rewrites the one-file directory's weights with `edit` applied to the tensors (F32 copies).
void rewrite_weights(const fs::path& dir, const std::function<void(std::map<std::string, Tensor>&)>& edit) {
  std::map<std::string, Tensor> tensors;
  {
    const SafetensorsFile f = SafetensorsFile::open(dir / "model.safetensors");
    for (const std::string& name : f.names()) tensors.emplace(name, f.read(name));
  }
  edit(tensors);
  SafetensorsWriter w;
  for (auto& [name, t] : tensors) w.add(name, t.view());
  w.write(dir / "model.safetensors");
}

TEST(HfModel, MalformedDirectoriesGiveOneErrorNamingFileAndTensorAndLoadNothing) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  Transformer source(export_config(), PrecisionPolicy{});
  source.init_random(3);
  export_hf_model(tmp / "sharded", source, {DType::kBF16, {}, /*max_shard_bytes=*/200 << 10});
  Transformer fp8_source(export_config(), fp8_policy());
  fp8_source.init_random(3);
  auto fresh_copy = [&](const char* name, bool sharded) {
    const fs::path dir = tmp / name;
    if (sharded) {
      fs::copy(tmp / "sharded", dir);
    } else {
      export_hf_model(dir, source, {});
    }
    return dir;
  };
  Transformer target(export_config(), PrecisionPolicy{});
  target.init_random(99);
  const std::vector<float> untouched(target.params(), target.params() + target.num_params());
  auto expect_error = [&](const fs::path& dir, std::initializer_list<std::string> parts) {
    const std::string message = load_error(dir, target);
    for (const std::string& part : parts) EXPECT_THAT(message, HasSubstr(part)) << dir.filename();
    EXPECT_EQ(0, std::memcmp(untouched.data(), target.params(), untouched.size() * sizeof(float)))
        << dir.filename() << ": parameters changed by a failed load";
  };

  const nlohmann::json weight_map = read_json_file(tmp / "sharded" / "model.safetensors.index.json").at("weight_map");
  const std::string first = weight_map.at("model.embed_tokens.weight"), last = weight_map.at("lm_head.weight");
  ASSERT_NE(first, last);
  const fs::path missing_shard = fresh_copy("missing_shard", true);
  fs::remove(missing_shard / last);
  expect_error(missing_shard, {"shard '" + last + "'", "is missing"});

  const fs::path truncated = fresh_copy("truncated", true);
  fs::resize_file(truncated / last, fs::file_size(truncated / last) - 10);
  expect_error(truncated, {last});

  const fs::path wrong_index = fresh_copy("wrong_index", true);
  {
    nlohmann::json index = read_json_file(wrong_index / "model.safetensors.index.json");
    index["weight_map"]["lm_head.weight"] = first;
    std::ofstream(wrong_index / "model.safetensors.index.json") << index.dump();
  }
  expect_error(wrong_index, {"puts tensor 'lm_head.weight' in '" + first + "'"});

  const fs::path missing_tensor = fresh_copy("missing_tensor", false);
  rewrite_weights(missing_tensor, [](auto& t) { t.erase("model.layers.1.mlp.down_proj.weight"); });
  expect_error(missing_tensor, {"missing tensor 'model.layers.1.mlp.down_proj.weight'", "[192, 320]"});

  const fs::path wrong_shape = fresh_copy("wrong_shape", false);
  rewrite_weights(wrong_shape, [](auto& t) { t.insert_or_assign("model.norm.weight", Tensor(DType::kF32, Shape{191})); });
  expect_error(wrong_shape, {"model.safetensors", "'model.norm.weight' has shape [191], expected [192]"});

  const fs::path wrong_dtype = fresh_copy("wrong_dtype", false);
  rewrite_weights(wrong_dtype, [](auto& t) { t.insert_or_assign("model.norm.weight", Tensor(DType::kI32, Shape{192})); });
  expect_error(wrong_dtype, {"model.safetensors", "'model.norm.weight' has dtype I32, expected F32, BF16, F16"});

  const fs::path bias = fresh_copy("bias", false);
  rewrite_weights(bias, [](auto& t) { t.emplace("model.layers.0.self_attn.q_proj.bias", Tensor(DType::kF32, Shape{192})); });
  expect_error(bias, {"model.safetensors", "'model.layers.0.self_attn.q_proj.bias' has no place"});

  const fs::path no_scales = tmp / "no_scales";
  export_hf_model(no_scales, fp8_source, {DType::kE4M3, {}});
  rewrite_weights(no_scales, [](auto& t) { t.erase("model.layers.1.self_attn.o_proj.weight_scale_inv"); });
  expect_error(no_scales, {"F8_E4M3 tensor 'model.layers.1.self_attn.o_proj.weight' has no "
                           "'model.layers.1.self_attn.o_proj.weight_scale_inv'"});

  const fs::path empty = tmp / "empty";
  fs::create_directories(empty);
  expect_error(empty, {"has neither model.safetensors nor model.safetensors.index.json"});
  EXPECT_THAT(config_error(empty), HasSubstr("has no config.json"));

  const fs::path mistral = fresh_copy("mistral", false);
  rewrite_config(mistral, [](nlohmann::json& j) { j["architectures"] = {"MistralForCausalLM"}; });
  EXPECT_THAT(config_error(mistral), HasSubstr("architecture 'MistralForCausalLM' is not supported"));
  rewrite_config(mistral, [](nlohmann::json& j) { j["model_type"] = "mistral"; });
  EXPECT_THAT(config_error(mistral), HasSubstr("model_type 'mistral' is not supported"));
  const fs::path biased = fresh_copy("attention_bias", false);
  rewrite_config(biased, [](nlohmann::json& j) { j["attention_bias"] = true; });
  EXPECT_THAT(config_error(biased), HasSubstr("key 'attention_bias' is true"));
  rewrite_config(biased, [](nlohmann::json& j) {
    j["attention_bias"] = false;
    j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  });
  EXPECT_THAT(config_error(biased), HasSubstr("rope_scaling type \"yarn\" is not supported"));
  rewrite_config(biased, [](nlohmann::json& j) { j.erase("hidden_size"); });
  EXPECT_THAT(config_error(biased), HasSubstr("missing key 'hidden_size'"));
  // Found by fuzz_hf_config: a missing number key used to escape as a bare JSON exception.
  rewrite_config(biased, [](nlohmann::json& j) {
    j["hidden_size"] = 64;
    j.erase("rms_norm_eps");
  });
  EXPECT_THAT(config_error(biased), HasSubstr("missing key 'rms_norm_eps'"));
  rewrite_config(biased, [](nlohmann::json& j) {  // found by fuzz_hf_config: infinite as an FP32 number
    j["rms_norm_eps"] = 1e306;
    j.erase("rope_scaling");
  });
  EXPECT_THAT(config_error(biased), HasSubstr("norm_eps (rms_norm_eps) must be in (0, 1], got inf"));
  rewrite_config(biased, [](nlohmann::json& j) {  // found by fuzz_hf_config: a derived head_dim of 2048
    j["rms_norm_eps"] = 1e-6;
    j["hidden_size"] = 2048;
    j["num_attention_heads"] = 1;
    j["num_key_value_heads"] = 1;
    j.erase("head_dim");
  });
  EXPECT_THAT(config_error(biased), HasSubstr("head_dim (hidden_size / num_attention_heads, as no head_dim is given) is 2048"));
  rewrite_config(biased, [](nlohmann::json& j) {
    j["rms_norm_eps"] = 1e-6;
    j["num_hidden_layers"] = 100000;
  });
  EXPECT_THAT(config_error(biased), HasSubstr("key 'num_hidden_layers' is 100000, expected 1 to 1024"));
}

}  // namespace
}  // namespace fp8rl
