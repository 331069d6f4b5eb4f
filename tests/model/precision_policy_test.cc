// The precision policy selects exactly the intended linears.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <map>

#include "core/check.h"
#include "model/transformer.h"

namespace fp8rl {
namespace {

std::map<std::string, Precision> linear_precisions(const PrecisionPolicy& policy) {
  Transformer model(model_preset("tiny", 32), policy);  // 2 layers
  std::map<std::string, Precision> out;
  for (const auto& l : model.linears()) out[l.name] = l.linear->precision();
  return out;
}

TEST(PrecisionPolicy, Fp8EverywhereByDefault) {
  PrecisionPolicy p;
  p.linear = Precision::kFP8;
  for (const auto& [name, prec] : linear_precisions(p)) {
    if (name == "model.embed_tokens.weight") {
      EXPECT_EQ(prec, Precision::kBF16) << "the LM head stays BF16";
    } else {
      EXPECT_EQ(prec, Precision::kFP8) << name;
    }
  }
}

TEST(PrecisionPolicy, FirstAndLastLayersAndIgnoreList) {
  PrecisionPolicy p;
  p.linear = Precision::kFP8;
  p.num_first_layers_in_bf16 = 1;
  auto first = linear_precisions(p);
  EXPECT_EQ(first["model.layers.0.self_attn.q_proj.weight"], Precision::kBF16);
  EXPECT_EQ(first["model.layers.0.mlp.down_proj.weight"], Precision::kBF16);
  EXPECT_EQ(first["model.layers.1.self_attn.q_proj.weight"], Precision::kFP8);

  p.num_first_layers_in_bf16 = 0;
  p.num_last_layers_in_bf16 = 1;
  auto last = linear_precisions(p);
  EXPECT_EQ(last["model.layers.0.mlp.up_proj.weight"], Precision::kFP8);
  EXPECT_EQ(last["model.layers.1.mlp.up_proj.weight"], Precision::kBF16);

  p.num_last_layers_in_bf16 = 0;
  p.bf16_linear_substrings = {"down_proj", "self_attn.o_proj"};
  auto ignore = linear_precisions(p);
  int fp8 = 0, bf16 = 0;
  for (const auto& [name, prec] : ignore) {
    const bool kept = name.find("down_proj") != std::string::npos || name.find("o_proj") != std::string::npos ||
                      name == "model.embed_tokens.weight";
    EXPECT_EQ(prec, kept ? Precision::kBF16 : Precision::kFP8) << name;
    (prec == Precision::kFP8 ? fp8 : bf16)++;
  }
  EXPECT_EQ(fp8, 2 * 5);
  EXPECT_EQ(bf16, 2 * 2 + 1);
}

TEST(PrecisionPolicy, Fp32LmHeadAndInvalidPolicies) {
  PrecisionPolicy p;
  p.fp32_lm_head = true;
  EXPECT_EQ(linear_precisions(p)["model.embed_tokens.weight"], Precision::kF32);
  PrecisionPolicy bad;
  bad.activations = Precision::kF32;
  bad.linear = Precision::kFP8;
  EXPECT_THROW(bad.validate(), Error);
  EXPECT_THROW(parse_precision("fp16"), Error);
}

}  // namespace
}  // namespace fp8rl
