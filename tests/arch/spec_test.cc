// The model spec (arch/spec.h): every tensor once, in the layout's order, with the shapes and
// names Hugging Face's Llama / Qwen3 / Qwen3-MoE modules give them; and the parts of the engine
// that iterate it (the parameter layout, both engines' linears, the refit) agree with it.
// ctest-file-label: quick
#include "arch/spec.h"

#include <gtest/gtest.h>

#include <set>

#include "model/params.h"
#include "model/transformer.h"
#include "rl/refit.h"

namespace fp8rl {
namespace {

TEST(ModelSpec, EveryTensorOnceWithItsHfNameAndShape) {
  for (const char* preset : {"tiny", "tiny-moe", "llama-3.2-1b", "qwen3-0.6b"}) {
    SCOPED_TRACE(preset);
    ModelConfig c = model_preset(preset, 64);
    c.mlp_only_layers = {0};  // a dense layer among the MoE ones (ignored by dense models)
    if (!c.is_moe()) c.mlp_only_layers.clear();
    const std::vector<TensorSpec> all = model_tensors(c);
    std::set<std::string> names;
    int64_t numel = 0;
    for (const TensorSpec& t : all) {
      EXPECT_TRUE(names.insert(t.name).second) << "twice: " << t.name;
      EXPECT_EQ(t.name, tensor_name(t.role, t.layer, t.expert));
      EXPECT_EQ(t.decay, t.shape.rank == 2) << t.name;
      numel += t.shape.numel();
    }
    EXPECT_EQ(numel, ParamLayout(c).numel());
    EXPECT_EQ(all.front().name, "model.embed_tokens.weight");
    EXPECT_EQ(tensor_spec(c, TensorRole::kQ, 0).name, "model.layers.0.self_attn.q_proj.weight");
    EXPECT_EQ(tensor_spec(c, TensorRole::kK, 1).shape, (Shape{c.kv_dim(), c.d_model}));
    EXPECT_EQ(tensor_spec(c, TensorRole::kO, 1).shape, (Shape{c.d_model, c.q_dim()}));
    EXPECT_EQ(names.count("model.layers.0.self_attn.q_norm.weight"), c.qk_norm ? 1u : 0u);
    EXPECT_EQ(names.count("lm_head.weight"), c.tie_embeddings ? 0u : 1u);
    EXPECT_EQ(names.count("model.layers.0.mlp.down_proj.weight"), 1u);
    if (c.is_moe()) {
      EXPECT_EQ(tensor_spec(c, TensorRole::kRouter, 1).name, "model.layers.1.mlp.gate.weight");
      EXPECT_EQ(tensor_spec(c, TensorRole::kExpertDown, 1, 3).name, "model.layers.1.mlp.experts.3.down_proj.weight");
      EXPECT_EQ(tensor_spec(c, TensorRole::kExpertDown, 1, 3).shape, (Shape{c.d_model, c.d_expert}));
      EXPECT_EQ(names.count("model.layers.1.mlp.up_proj.weight"), 0u);
    }
  }
}

TEST(ModelSpec, Qwen2HasItsBiasesAndNoQkNorms) {
  ModelConfig c = model_preset("tiny", 64);
  c.qkv_bias = true;
  EXPECT_EQ(tensor_spec(c, TensorRole::kQBias, 1).name, "model.layers.1.self_attn.q_proj.bias");
  EXPECT_EQ(tensor_spec(c, TensorRole::kKBias, 0).shape, (Shape{c.kv_dim()}));
  const TensorSpec v = tensor_spec(c, TensorRole::kVBias, 0);
  EXPECT_FALSE(v.decay);
  EXPECT_EQ(v.rule, PrecisionRule::kVector);
  EXPECT_TRUE(is_bias(v.role));
  EXPECT_EQ(bias_role(TensorRole::kV), TensorRole::kVBias);
  for (const TensorSpec& t : layer_linears(c, 0)) EXPECT_FALSE(is_bias(t.role)) << "a bias is not a linear";
  Transformer model(c, PrecisionPolicy{});
  EXPECT_EQ(model.linear(TensorRole::kK, 1).bias(), model.weights().layers[1].bk);
  EXPECT_EQ(model.linear(TensorRole::kO, 1).bias(), nullptr);
}

TEST(ModelSpec, LayerLinearsAreTheLayersMatricesInEngineOrder) {
  const ModelConfig c = model_preset("tiny-moe", 64);
  std::vector<TensorRole> roles;
  for (const TensorSpec& t : layer_linears(c, 0)) roles.push_back(t.role);
  ASSERT_EQ(roles.size(), 4u + 1u + 3u * static_cast<size_t>(c.num_experts));
  EXPECT_EQ(roles[0], TensorRole::kQ);
  EXPECT_EQ(roles[3], TensorRole::kO);
  EXPECT_EQ(roles[4], TensorRole::kRouter);
  EXPECT_EQ(roles[5], TensorRole::kExpertGate);
  EXPECT_EQ(roles[7], TensorRole::kExpertDown);
  for (const TensorSpec& t : layer_linears(c, 0)) EXPECT_EQ(t.shape.rank, 2) << t.name;
}

TEST(ModelSpec, OnePrecisionRuleForEachKindOfTensor) {
  const ModelConfig c = model_preset("tiny-moe", 64);
  PrecisionPolicy fp8;
  fp8.linear = Precision::kFP8;
  fp8.num_last_layers_in_bf16 = 1;
  EXPECT_EQ(linear_precision(fp8, c.n_layers, tensor_spec(c, TensorRole::kQ, 0)), Precision::kFP8);
  EXPECT_EQ(linear_precision(fp8, c.n_layers, tensor_spec(c, TensorRole::kQ, c.n_layers - 1)), Precision::kBF16);
  EXPECT_EQ(linear_precision(fp8, c.n_layers, tensor_spec(c, TensorRole::kRouter, 0)), Precision::kF32);
  EXPECT_EQ(linear_precision(fp8, c.n_layers, lm_head_linear(c)), Precision::kBF16);
  EXPECT_EQ(lm_head_precision(PrecisionPolicy::fp32()), Precision::kF32);
  fp8.fp32_lm_head = true;
  EXPECT_EQ(lm_head_precision(fp8), Precision::kF32);
  EXPECT_THROW(linear_precision(fp8, c.n_layers, tensor_spec(c, TensorRole::kAttnNorm, 0)), std::exception);
}

TEST(ModelSpec, TrainerLinearsAndBoundPointersFollowTheSpec) {
  for (const char* preset : {"tiny", "tiny-moe"}) {
    SCOPED_TRACE(preset);
    const ModelConfig c = model_preset(preset, 64);
    PrecisionPolicy fp8;
    fp8.linear = Precision::kFP8;
    Transformer model(c, fp8);
    const ParamLayout& layout = model.layout();
    for (const Transformer::NamedLinear& l : model.linears()) {
      EXPECT_EQ(l.linear->name(), l.name);
      EXPECT_EQ(l.linear->precision(), linear_precision(fp8, c.n_layers, l)) << l.name;
    }
    const WeightPointers& w = model.weights();
    const float* base = model.params();
    EXPECT_EQ(w.layers[1].wv, base + layout.find(TensorRole::kV, 1).offset);
    EXPECT_EQ(w.layers[0].mlp_norm, base + layout.find("model.layers.0.post_attention_layernorm.weight").offset);
    EXPECT_EQ(w.lm_head, w.embed);  // tied
    if (c.is_moe()) {
      EXPECT_EQ(w.layers[1].moe.down[2], base + layout.find(TensorRole::kExpertDown, 1, 2).offset);
    }
    // The refit takes each projection by its role: q is layer 0's q, whatever the order.
    const GeneratorWeightSource src = generator_weight_source(model);
    EXPECT_EQ(src.layers[0].q.fp8, &model.linear(TensorRole::kQ, 0).fp8_weights().rowwise);
    EXPECT_EQ(src.layers[1].o.fp8, &model.linear(TensorRole::kO, 1).fp8_weights().rowwise);
  }
}

}  // namespace
}  // namespace fp8rl
