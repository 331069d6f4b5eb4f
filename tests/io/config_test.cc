// ctest-file-label: quick
#include "io/config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

enum class KvDtype { kBf16, kFp8 };

// A config struct shaped like the RL code's, bound field by field.
struct RunConfig {
  int64_t max_num_steps = 0;
  int num_prompts_per_step = 0;
  uint64_t seed = 0;
  double lr = 0;
  float clip = 0;
  bool use_is = false;
  std::string name;
  std::string kl_type;
  KvDtype kv = KvDtype::kBf16;
  std::vector<std::string> bf16_names;
  std::optional<double> tis_ratio;
  std::optional<std::string> log_dir;

  void bind(ConfigSchema& s) {
    s.add("grpo.max_num_steps", &max_num_steps, 100, "optimizer steps").at_least(1);
    s.add("grpo.num_prompts_per_step", &num_prompts_per_step, 8, "prompts drawn per step").greater_than(0);
    s.add("grpo.seed", &seed, 42, "seed of every random stream");
    s.add("policy.optimizer.lr", &lr, 1e-5, "AdamW learning rate").range(0, 1);
    s.add("loss_fn.ratio_clip_max", &clip, 0.2f, "upper PPO clip").range(0, 10);
    s.add("loss_fn.use_importance_sampling_correction", &use_is, true, "IS correction");
    s.add("name", &name, "run", "run name");
    s.add("loss_fn.reference_policy_kl_type", &kl_type, "k3", "KL estimator").choices({"k1", "k2", "k3"});
    s.add_enum("kv_cache_dtype", &kv, KvDtype::kBf16, {{"bf16", KvDtype::kBf16}, {"fp8", KvDtype::kFp8}}, "KV cache dtype");
    s.add("policy.precision.bf16_name_substrings", &bf16_names, {"lm_head"}, "linears kept in BF16");
    s.add("loss_fn.truncated_importance_sampling_ratio", &tis_ratio, std::nullopt, "TIS cap C").greater_than(0);
    s.add("logger.log_dir", &log_dir, std::nullopt, "run directory");
  }
};

std::string load_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

class ConfigTest : public ::testing::Test {
 protected:
  ConfigTest() { cfg.bind(schema); }
  std::string file(std::string_view name, std::string_view text) { return tmp.write(name, text).string(); }

  TempDir tmp;
  ConfigSchema schema;
  RunConfig cfg;
};

TEST_F(ConfigTest, DefaultsAreSetWhenBound) {
  EXPECT_EQ(cfg.max_num_steps, 100);
  EXPECT_EQ(cfg.lr, 1e-5);
  EXPECT_EQ(cfg.clip, 0.2f);
  EXPECT_EQ(cfg.kl_type, "k3");
  EXPECT_EQ(cfg.bf16_names, std::vector<std::string>{"lm_head"});
  EXPECT_FALSE(cfg.tis_ratio.has_value());
}

TEST_F(ConfigTest, RecipeNestedAndDottedKeys) {
  schema.load(file("r.yaml", R"(
grpo:
  max_num_steps: 20
  seed: 7
policy.optimizer.lr: 3.0e-6
kv_cache_dtype: fp8
loss_fn:
  use_importance_sampling_correction: false
  truncated_importance_sampling_ratio: 2
policy:
  precision:
    bf16_name_substrings: [lm_head, embed]
)"));
  EXPECT_EQ(cfg.max_num_steps, 20);
  EXPECT_EQ(cfg.seed, 7u);
  EXPECT_EQ(cfg.lr, 3e-6);
  EXPECT_EQ(cfg.kv, KvDtype::kFp8);
  EXPECT_FALSE(cfg.use_is);
  EXPECT_EQ(cfg.tis_ratio, 2.0);
  EXPECT_EQ(cfg.bf16_names, (std::vector<std::string>{"lm_head", "embed"}));
  EXPECT_EQ(cfg.num_prompts_per_step, 8) << "untouched keys keep their defaults";
}

TEST_F(ConfigTest, IncludesChainAndOverridePrecedence) {
  file("base/base.yaml", "grpo: {max_num_steps: 1, seed: 1, num_prompts_per_step: 1}\nname: base\n");
  file("mid.yaml", "defaults: base/base.yaml\ngrpo: {seed: 2, num_prompts_per_step: 2}\n");
  const std::string top = file("top.yaml", "defaults: mid.yaml\ngrpo:\n  num_prompts_per_step: 3\n");
  schema.load(top);
  EXPECT_EQ(cfg.max_num_steps, 1);        // from base
  EXPECT_EQ(cfg.seed, 2u);                // mid overrides base
  EXPECT_EQ(cfg.num_prompts_per_step, 3); // top overrides mid
  EXPECT_EQ(cfg.name, "base");
  schema.load(top, {"grpo.seed=5", "grpo.seed=6", "name=cli", "loss_fn.truncated_importance_sampling_ratio=1.5"});
  EXPECT_EQ(cfg.seed, 6u) << "later overrides win";
  EXPECT_EQ(cfg.name, "cli");
  EXPECT_EQ(cfg.tis_ratio, 1.5);
  EXPECT_EQ(cfg.num_prompts_per_step, 3);
  schema.load(top);
  EXPECT_EQ(cfg.seed, 2u) << "a load starts from the defaults, not from the previous load";
  EXPECT_FALSE(cfg.tis_ratio.has_value());
}

TEST_F(ConfigTest, OverrideValuesAreYaml) {
  schema.load_overrides({"policy.precision.bf16_name_substrings=[a, b]", "logger.log_dir=runs/x",
                         "loss_fn.truncated_importance_sampling_ratio=null", "grpo={max_num_steps: 9}"});
  EXPECT_EQ(cfg.bf16_names, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(cfg.log_dir, "runs/x");
  EXPECT_FALSE(cfg.tis_ratio.has_value());
  EXPECT_EQ(cfg.max_num_steps, 9);
  schema.load_overrides({"policy.precision.bf16_name_substrings=[]"});
  EXPECT_TRUE(cfg.bf16_names.empty());
}

TEST_F(ConfigTest, IncludeErrors) {
  const std::string a = file("a.yaml", "defaults: b.yaml\nname: a\n");
  file("b.yaml", "defaults: a.yaml\n");
  EXPECT_THAT(load_error([&] { schema.load(a); }), HasSubstr("recipe include cycle: "));
  EXPECT_THAT(load_error([&] { schema.load(a); }), HasSubstr("b.yaml -> "));
  const std::string c = file("c.yaml", "name: c\ndefaults: missing.yaml\n");
  EXPECT_THAT(load_error([&] { schema.load(c); }),
              HasSubstr("missing.yaml' (named by `defaults` at " + c + ":2): cannot open: No such file or directory"));
  EXPECT_THAT(load_error([&] { schema.load(tmp / "nope.yaml"); }),
              HasSubstr("nope.yaml': cannot open: No such file or directory"));
  const std::string self = file("self.yaml", "defaults: self.yaml\n");
  EXPECT_THAT(load_error([&] { schema.load(self); }), HasSubstr("recipe include cycle"));
}

TEST_F(ConfigTest, UnknownKeysSuggestTheNearest) {
  const std::string r = file("x.yaml", "grpo:\n  max_num_step: 5\n");
  EXPECT_THAT(load_error([&] { schema.load(r); }),
              HasSubstr("unknown key 'grpo.max_num_step' in " + r + ":2 (did you mean 'grpo.max_num_steps'?)"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"policy.optimizer.lrr=1"}); }),
              HasSubstr("unknown key 'policy.optimizer.lrr' in command line 'policy.optimizer.lrr=1' (did you mean "
                        "'policy.optimizer.lr'?)"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"max_num_steps=3"}); }),
              HasSubstr("(did you mean 'grpo.max_num_steps'?)"));
  const std::string far = load_error([&] { schema.load_overrides({"completely_unrelated_thing=1"}); });
  EXPECT_THAT(far, HasSubstr("unknown key 'completely_unrelated_thing'"));
  EXPECT_THAT(far, ::testing::Not(HasSubstr("did you mean")));
}

TEST_F(ConfigTest, TypeErrorsNameKeySourceAndExpectedType) {
  const std::string r = file("t.yaml", "name: ok\ngrpo:\n  max_num_steps: many\n");
  EXPECT_THAT(load_error([&] { schema.load(r); }),
              HasSubstr("key 'grpo.max_num_steps' in " + r + ":3 expects an integer >= 1, found 'many'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.max_num_steps=1.5"}); }),
              HasSubstr("in command line 'grpo.max_num_steps=1.5' expects an integer >= 1, found '1.5'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"loss_fn.use_importance_sampling_correction=yes"}); }),
              HasSubstr("expects a boolean (true or false), found 'yes'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"policy.precision.bf16_name_substrings=lm_head"}); }),
              HasSubstr("expects a list of strings, e.g. [a, b], found 'lm_head'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"policy.optimizer.lr=fast"}); }),
              HasSubstr("expects a number in [0, 1], found 'fast'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"name=[a]"}); }), HasSubstr("expects a string, found a list"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.seed="}); }), HasSubstr("found null"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo=3"}); }),
              HasSubstr("key 'grpo' in command line 'grpo=3' is a section (e.g. 'grpo.max_num_steps'), not a value"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.seed"}); }), HasSubstr("has the form key.path=value"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"name=[unclosed"}); }), HasSubstr("the value is not valid YAML"));
}

TEST_F(ConfigTest, RangeAndChoiceErrors) {
  EXPECT_THAT(load_error([&] { schema.load_overrides({"policy.optimizer.lr=2"}); }),
              HasSubstr("key 'policy.optimizer.lr' in command line 'policy.optimizer.lr=2' expects a number in [0, 1], found 2.0"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.max_num_steps=0"}); }), HasSubstr("expects an integer >= 1, found 0"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.num_prompts_per_step=0"}); }), HasSubstr("an integer > 0"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.num_prompts_per_step=3000000000"}); }),
              HasSubstr("expects an integer > 0 and <= 2147483647, found 3000000000"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"grpo.seed=-1"}); }), HasSubstr("found -1"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"kv_cache_dtype=fp16"}); }),
              HasSubstr("expects one of 'bf16', 'fp8', found \"fp16\""));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"loss_fn.reference_policy_kl_type=k4"}); }),
              HasSubstr("one of 'k1', 'k2', 'k3'"));
  EXPECT_THAT(load_error([&] { schema.load_overrides({"loss_fn.truncated_importance_sampling_ratio=0"}); }),
              HasSubstr("expects a number > 0, or null, found 0.0"));
}

TEST_F(ConfigTest, DuplicateKeysInOneFileAreRejected) {
  const std::string r = file("d.yaml", "grpo:\n  seed: 1\ngrpo.seed: 2\n");
  EXPECT_THAT(load_error([&] { schema.load(r); }), HasSubstr("key 'grpo.seed' is given twice in this source"));
  const std::string literal = file("d2.yaml", "grpo:\n  seed: 1\n  seed: 2\n");
  EXPECT_THAT(load_error([&] { schema.load(literal); }), HasSubstr(literal + ":3: key 'grpo.seed' is given twice"));
}

TEST_F(ConfigTest, FailedLoadChangesNothing) {
  schema.load_overrides({"grpo.max_num_steps=7", "name=kept"});
  EXPECT_THROW(schema.load_overrides({"grpo.max_num_steps=8", "name=lost", "policy.optimizer.lr=5"}), Error);
  EXPECT_EQ(cfg.max_num_steps, 7);
  EXPECT_EQ(cfg.name, "kept");
}

TEST_F(ConfigTest, EmptyRecipeAndEmptySectionsAreFine) {
  schema.load(file("empty.yaml", ""));
  schema.load(file("sections.yaml", "grpo:\nloss_fn: {}\n"));
  EXPECT_EQ(cfg.max_num_steps, 100);
  EXPECT_THAT(load_error([&] { schema.load(file("list.yaml", "- a\n- b\n")); }), HasSubstr("must be a mapping"));
}

TEST_F(ConfigTest, PrintsNestedSortedYaml) {
  ConfigSchema s;
  int64_t b = 0, a2 = 0;
  std::string a1;
  double z = 0;
  s.add("zeta", &z, 0.5, "z");
  s.add("sec.b", &b, 3, "b help");
  s.add("sec.inner.a2", &a2, -4, "a2");
  s.add("sec.a1", &a1, "x y", "a1");
  EXPECT_EQ(s.to_yaml(), "sec:\n  a1: \"x y\"\n  b: 3\n  inner:\n    a2: -4\nzeta: 0.5\n");
  EXPECT_THAT(s.to_yaml(/*with_help=*/true), HasSubstr("  # b help\n  b: 3\n"));
  EXPECT_THAT(s.help_text(), HasSubstr("sec.b = 3\n      an integer; b help"));
}

TEST_F(ConfigTest, PrintedConfigLoadsBackToTheSameValues) {
  schema.load_overrides({"grpo.max_num_steps=123456789012", "grpo.seed=9223372036854775807", "policy.optimizer.lr=1e-7",
                         "loss_fn.ratio_clip_max=0.1", "name=\"quote \\\" back\\\\slash: #hash\"",
                         "loss_fn.use_importance_sampling_correction=false", "kv_cache_dtype=fp8",
                         "policy.precision.bf16_name_substrings=['true', '1e5', '']", "logger.log_dir=runs/a b"});
  const std::string printed = schema.to_yaml(/*with_help=*/true);
  EXPECT_THAT(printed, HasSubstr("  ratio_clip_max: 0.1\n")) << "floats print in their shortest form";
  RunConfig other;
  ConfigSchema other_schema;
  other.bind(other_schema);
  other_schema.load(file("printed.yaml", printed));
  EXPECT_EQ(other.max_num_steps, 123456789012);
  EXPECT_EQ(other.seed, 9223372036854775807u);
  EXPECT_EQ(other.lr, 1e-7);
  EXPECT_EQ(other.clip, 0.1f);
  EXPECT_EQ(other.name, "quote \" back\\slash: #hash");
  EXPECT_FALSE(other.use_is);
  EXPECT_EQ(other.kv, KvDtype::kFp8);
  EXPECT_EQ(other.bf16_names, (std::vector<std::string>{"true", "1e5", ""}));
  EXPECT_EQ(other.log_dir, "runs/a b");
  EXPECT_FALSE(other.tis_ratio.has_value());
  EXPECT_EQ(other_schema.to_yaml(true), printed);
}

TEST(ConfigSchemaContract, ProgrammingErrorsAreCaught) {
  ConfigSchema s;
  int64_t a = 0, b = 0;
  s.add("x.a", &a, 1, "");
  EXPECT_THROW(s.add("x.a", &b, 1, ""), Error);
  EXPECT_THROW(s.add("x", &b, 1, ""), Error);  // a key cannot also be a section
  EXPECT_THROW(s.add("x.a.b", &b, 1, ""), Error);
  EXPECT_THROW(s.add("bad key", &b, 1, ""), Error);
  EXPECT_THROW(s.add("y", &b, 0, "").at_least(1), Error);  // default outside its own range
  std::string str;
  EXPECT_THROW(s.add("z", &str, "c", "").choices({"a", "b"}), Error);
}

}  // namespace
}  // namespace fp8rl
