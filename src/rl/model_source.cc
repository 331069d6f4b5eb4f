#include "rl/model_source.h"

#include <fmt/format.h>

#include "core/check.h"
#include "model/checkpoint.h"
#include "tasks/char_tokenizer.h"
#include "tasks/chat_tokenizer.h"

namespace fp8rl {

namespace fs = std::filesystem;

std::unique_ptr<Tokenizer> load_model_tokenizer(const fs::path& dir, std::string_view chat_format,
                                                const ModelConfig& model) {
  std::unique_ptr<Tokenizer> tok;
  std::string source = "the character vocabulary";
  if (!dir.empty() && fs::exists(dir / "tokenizer.json")) {
    source = (dir / "tokenizer.json").string();
    tok = std::make_unique<ChatTokenizer>(ChatTokenizer::load(source, chat_format));
  } else {
    tok = std::make_unique<CharTokenizer>();
  }
  FP8RL_CHECK(tok->vocab_size() <= model.vocab_size, "{} has {} ids but the model's vocab_size is {}{}", source,
              tok->vocab_size(), model.vocab_size,
              dir.empty() ? std::string() : fmt::format(" ('{}')", (dir / "config.json").string()));
  return tok;
}

std::unique_ptr<Tokenizer> load_job_tokenizer(const RunConfig& config, const ModelConfig& model) {
  return load_model_tokenizer(config.model_dir().value_or(""), config.chat_format, model);
}

Transformer load_job_model(const RunConfig& config) {
  if (const std::optional<std::string> dir = config.model_dir()) {
    Transformer model(load_model_config(*dir), config.trainer_policy());
    load_model_weights(*dir, model);
    model.set_activation_checkpointing(config.activation_checkpointing);
    return model;
  }
  Transformer model(config.model_config(), config.trainer_policy());
  model.init_random(static_cast<uint64_t>(config.model_seed));
  model.set_activation_checkpointing(config.activation_checkpointing);
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
    options.format = HfExportFormat::kFP8;
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

void export_model_directory(const fs::path& from, const fs::path& to, HfExportFormat format,
                            const PrecisionPolicy& policy) {
  Transformer model(load_model_config(from), policy);
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
    FP8RL_CHECK(n + max_new_tokens <= max_seq_len,
                "{} example {} ('{}'): its prompt's {} tokens + generation.max_new_tokens {} exceed the model's "
                "max_seq_len {}",
                split, i, examples[i].prompt.size() > 60 ? examples[i].prompt.substr(0, 60) + "..." : examples[i].prompt,
                n, max_new_tokens, max_seq_len);
  }
  return out;
}

}  // namespace fp8rl
