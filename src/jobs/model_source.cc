#include "jobs/model_source.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "core/check.h"
#include "model/checkpoint.h"
#include "tokenizer/char_tokenizer.h"
#include "tokenizer/chat_tokenizer.h"

namespace fp8rl {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_model_tokenizer(const fs::path& dir, std::string_view chat_format,
                                                const ModelConfig& model, TokenizerChoice choice) {
  std::unique_ptr<Tokenizer> tok;
  std::string source = "the character vocabulary";
  if (choice == TokenizerChoice::kAuto && !dir.empty() &&
      (fs::exists(dir / "tokenizer.json") || !uses_char_tokenizer(read_hf_config_json(dir)))) {
    // A model directory speaks its own tokenizer: without it the ids would mean other tokens.
    FP8RL_REQUIRE(fs::exists(dir / "tokenizer.json"),
                  "model directory '{}' has no tokenizer.json: copy the model's tokenizer.json there, or set "
                  "tokenizer.name=char to use fp8rl's character vocabulary (99 ids)",
                  dir.string());
    source = (dir / "tokenizer.json").string();
    tok = std::make_unique<ChatTokenizer>(ChatTokenizer::load(source, chat_format));
  } else {
    tok = std::make_unique<CharTokenizer>();
  }
  FP8RL_REQUIRE(tok->vocab_size() <= model.vocab_size, "{} has {} ids but the model's vocab_size is {}{}", source,
              tok->vocab_size(), model.vocab_size,
              dir.empty() ? std::string() : fmt::format(" ('{}')", (dir / "config.json").string()));
  return tok;
}

std::unique_ptr<Tokenizer> load_job_tokenizer(const RunConfig& config, const ModelConfig& model) {
  return load_model_tokenizer(config.model_dir().value_or(""), config.chat_format, model, config.tokenizer);
}

namespace {
// The trainer's options of RunConfig, on a model; the MoE ones refused for a dense model.
void set_training_options(const RunConfig& config, Transformer& model) {
  model.set_activation_checkpointing(config.activation_checkpointing);
  const ModelConfig& mc = model.config();
  for (auto [key, on] : {std::pair{"policy.router_replay: true", config.router_replay},
                         std::pair{"policy.freeze_router: true", config.freeze_router},
                         std::pair{"policy.aux_loss_coef > 0", config.aux_loss_coef > 0}})
    FP8RL_REQUIRE(!on || mc.num_moe_layers() > 0, "{} needs a Mixture-of-Experts model ('{}' has no MoE layers)", key,
                  config.model_dir().value_or(mc.preset));
  model.set_router_frozen(config.freeze_router);
}
}  // namespace

Transformer load_job_model(const RunConfig& config) {
  if (const std::optional<std::string> dir = config.model_dir()) {
    const ModelConfig model_config = load_model_config(*dir);
    // FP32 masters, gradients and the two AdamW moments at the least.
    check_model_directory(*dir, model_config, 16.0, "training");
    Transformer model(model_config, config.trainer_policy());
    load_model_weights(*dir, model);
    set_training_options(config, model);
    return model;
  }
  Transformer model(config.model_config(), config.trainer_policy());
  model.init_random(static_cast<uint64_t>(config.model_seed));
  set_training_options(config, model);
  return model;
}

void export_job_model(const RunConfig& config, const Transformer& model) {
  HfExportOptions options;
  if (const std::optional<std::string> dir = config.model_dir()) options.source_dir = *dir;
  const fs::path log_dir = config.log_dir;
  if (config.export_hf) {
    export_hf_model(log_dir / "hf", model, options);
    fmt::print("exported the policy as a Hugging Face directory (BF16): {}\n", (log_dir / "hf").string());
  }
  if (config.export_fp8) {
    options.format = DType::kE4M3;
    if (model.policy().linear == Precision::kFP8) {
      export_hf_model(log_dir / "hf-fp8", model, options);
    } else {
      PrecisionPolicy fp8 = model.policy();
      fp8.linear = Precision::kFP8;
      Transformer quantized(model.config(), fp8);
      std::copy(model.params(), model.params() + model.num_params(), quantized.params());
      quantized.refresh_weights();
      export_hf_model(log_dir / "hf-fp8", quantized, options);
    }
    fmt::print("exported the policy in FP8 (E4M3, 128x128 block scales): {}\n", (log_dir / "hf-fp8").string());
  }
}

void export_model_directory(const fs::path& from, const fs::path& to, DType format,
                            const PrecisionPolicy& policy, bool force) {
  // The target is replaced whole (atomically): never the source, nor a directory holding it, nor
  // (without --force) a directory the user may still need.
  std::error_code ec;
  const fs::path source = fs::weakly_canonical(from, ec), target = fs::weakly_canonical(to, ec);
  const auto inside = [](const fs::path& p, const fs::path& dir) {
    const auto [d, _] = std::mismatch(dir.begin(), dir.end(), p.begin(), p.end());
    return d == dir.end();
  };
  FP8RL_REQUIRE(!inside(source, target),
                "export: the target '{}' {} the source '{}': writing it would destroy what is read; choose another "
                "directory",
                to.string(), source == target ? "is" : "contains", from.string());
  if (fs::exists(to)) {
    FP8RL_REQUIRE(fs::is_directory(to), "export: the target '{}' exists and is not a directory", to.string());
    FP8RL_REQUIRE(force || fs::is_empty(to),
                  "export: the target '{}' exists and is not empty; pass --force to replace it (its files are deleted)",
                  to.string());
  }
  const ModelConfig config = load_model_config(from);
  check_model_directory(from, config, 8.0, "export");  // FP32 masters and gradients
  Transformer model(config, policy);
  load_model_weights(from, model);
  export_hf_model(to, model, {format, from});
  fmt::print("exported '{}' ({}) to '{}'\n", from.string(), hf_export_format_name(format), to.string());
}

std::vector<std::vector<int32_t>> encode_prompts(const Tokenizer& tokenizer, const std::vector<Example>& examples,
                                                 int64_t max_new_tokens, int64_t max_seq_len, const char* split) {
  std::vector<std::vector<int32_t>> out;
  out.reserve(examples.size());
  for (size_t i = 0; i < examples.size(); ++i) {
    out.push_back(tokenizer.encode_prompt(examples[i].prompt));
    const int64_t n = static_cast<int64_t>(out.back().size());
    FP8RL_REQUIRE(n + max_new_tokens <= max_seq_len,
                "{} example {} ('{}'): its prompt's {} tokens + generation.max_new_tokens {} exceed the model's "
                "max_seq_len {}",
                split, i, examples[i].prompt.size() > 60 ? examples[i].prompt.substr(0, 60) + "..." : examples[i].prompt,
                n, max_new_tokens, max_seq_len);
  }
  return out;
}

}  // namespace fp8rl
