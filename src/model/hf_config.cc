#include "model/hf_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "core/check.h"
#include "io/input_file.h"
#include "io/json_depth.h"

namespace fp8rl {

namespace fs = std::filesystem;

nlohmann::json hf_config_json(const ModelConfig& c, const nlohmann::json& base) {
  nlohmann::json j = base.is_object() ? base : nlohmann::json::object();
  FP8RL_REQUIRE(!c.is_moe() || c.qk_norm,
                "an MoE model is written as Qwen3-MoE, which has q/k-norm; this one (preset '{}') has none", c.preset);
  FP8RL_REQUIRE(!c.qkv_bias || (!c.qk_norm && !c.is_moe()),
                "a model with q, k, v biases is written as Qwen2, which has no q/k-norm and no experts (preset '{}')",
                c.preset);
  j["architectures"] = {c.is_moe()     ? "Qwen3MoeForCausalLM"
                        : c.qk_norm    ? "Qwen3ForCausalLM"
                        : c.qkv_bias ? "Qwen2ForCausalLM"
                                       : "LlamaForCausalLM"};
  j["model_type"] = c.is_moe() ? "qwen3_moe" : c.qk_norm ? "qwen3" : c.qkv_bias ? "qwen2" : "llama";
  for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size", "norm_topk_prob",
                          "decoder_sparse_step", "mlp_only_layers"})
    j.erase(key);
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.experts_per_token;
    j["moe_intermediate_size"] = c.d_expert;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
  }
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.d_model;
  j["intermediate_size"] = c.d_ff;
  j["num_hidden_layers"] = c.n_layers;
  j["num_attention_heads"] = c.n_heads;
  j["num_key_value_heads"] = c.n_kv_heads;
  j["head_dim"] = c.head_dim;
  j["max_position_embeddings"] = c.max_seq_len;
  j["rms_norm_eps"] = c.norm_eps;
  j["rope_theta"] = c.rope_theta;
  j["tie_word_embeddings"] = c.tie_embeddings;
  j["hidden_act"] = "silu";
  j.erase("attention_bias");  // Qwen2's biases are its architecture's; Llama's and Qwen3's are off
  if (!c.qkv_bias) j["attention_bias"] = false;
  if (c.qkv_bias) j["use_sliding_window"] = false;
  if (!j.contains("torch_dtype")) j["torch_dtype"] = "float32";
  if (c.rope_llama3_scaling) {
    j["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", c.rope_scaling.factor},
                         {"low_freq_factor", c.rope_scaling.low_freq_factor},
                         {"high_freq_factor", c.rope_scaling.high_freq_factor},
                         {"original_max_position_embeddings", c.rope_scaling.original_max_position}};
  } else {
    j["rope_scaling"] = nullptr;
  }
  j["fp8rl_preset"] = c.preset;
  return j;
}

ModelConfig model_config_from_hf_json(const nlohmann::json& j, const std::string& source) {
  FP8RL_REQUIRE(j.is_object(), "{}: expected a JSON object", source);
  auto get = [&](const char* key) -> const nlohmann::json& {
    FP8RL_REQUIRE(j.contains(key), "{}: missing key '{}'", source, key);
    return j.at(key);
  };
  auto integer = [&](const char* key) {
    const nlohmann::json& v = get(key);
    FP8RL_REQUIRE(v.is_number_integer(), "{}: key '{}' must be an integer, got {}", source, key, v.dump());
    return v.get<int64_t>();
  };
  auto number = [&](const nlohmann::json& obj, const char* key) {
    FP8RL_REQUIRE(obj.contains(key), "{}: missing key '{}'", source, key);
    const nlohmann::json& v = obj.at(key);
    FP8RL_REQUIRE(v.is_number(), "{}: key '{}' must be a number, got {}", source, key, v.dump());
    return v.get<double>();
  };
  auto text = [&](const char* key, const char* fallback) {
    if (!j.contains(key) || j[key].is_null()) return std::string(fallback);
    FP8RL_REQUIRE(j[key].is_string(), "{}: key '{}' must be a string, got {}", source, key, j[key].dump());
    return j[key].get<std::string>();
  };
  auto flag = [&](const char* key, bool fallback) {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    FP8RL_REQUIRE(j[key].is_boolean(), "{}: key '{}' must be true or false, got {}", source, key, j[key].dump());
    return j[key].get<bool>();
  };

  const std::string model_type = text("model_type", "llama");
  FP8RL_REQUIRE(model_type == "llama" || model_type == "qwen2" || model_type == "qwen3" || model_type == "qwen3_moe",
                "{}: model_type '{}' is not supported (fp8rl implements llama, qwen2, qwen3 and qwen3_moe)", source,
                model_type);
  if (j.contains("architectures")) {
    const nlohmann::json& a = j["architectures"];
    FP8RL_REQUIRE(a.is_array() && a.size() == 1 && a[0].is_string(),
                "{}: key 'architectures' must be a list of one name, got {}", source, a.dump());
    const std::string arch = a[0].get<std::string>();
    const char* expected = model_type == "qwen3_moe" ? "Qwen3MoeForCausalLM"
                           : model_type == "qwen3"   ? "Qwen3ForCausalLM"
                           : model_type == "qwen2"   ? "Qwen2ForCausalLM"
                                                     : "LlamaForCausalLM";
    FP8RL_REQUIRE(arch == expected, "{}: architecture '{}' is not supported with model_type '{}' (expected {})", source,
                arch, model_type, expected);
  }
  FP8RL_REQUIRE(text("hidden_act", "silu") == "silu", "{}: hidden_act '{}' is not supported (expected silu)", source,
              text("hidden_act", "silu"));
  for (const char* key : {"attention_bias", "mlp_bias", "use_sliding_window"})
    FP8RL_REQUIRE(!flag(key, false), "{}: key '{}' is true, which fp8rl does not implement", source, key);

  // Each size within bounds far above any released model's (Llama 3.1 405B: hidden 16,384, FFN
  // 53,248, 126 layers), so that a corrupt file is refused here instead of by the allocator.
  auto size = [&](const char* key, int64_t limit) {
    const int64_t v = integer(key);
    FP8RL_REQUIRE(v >= 1 && v <= limit, "{}: key '{}' is {}, expected 1 to {}", source, key, v, limit);
    return v;
  };
  ModelConfig c;
  c.preset = text("fp8rl_preset", "custom");
  c.vocab_size = size("vocab_size", int64_t{1} << 22);
  c.d_model = size("hidden_size", int64_t{1} << 16);
  c.d_ff = size("intermediate_size", int64_t{1} << 18);
  c.n_layers = size("num_hidden_layers", 1024);
  c.n_heads = size("num_attention_heads", 1024);
  c.n_kv_heads = j.contains("num_key_value_heads") ? size("num_key_value_heads", 1024) : c.n_heads;
  c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? size("head_dim", 1024)
                                                                  : c.d_model / std::max<int64_t>(1, c.n_heads);
  // Found by fuzz_hf_config: the derived head_dim must meet the bound an explicit one meets (an
  // export writes it out).
  FP8RL_REQUIRE(c.head_dim >= 1 && c.head_dim <= 1024,
                "{}: head_dim (hidden_size / num_attention_heads, as no head_dim is given) is {}, expected 1 to 1024",
                source, c.head_dim);
  c.max_seq_len = size("max_position_embeddings", int64_t{1} << 21);
  c.norm_eps = static_cast<float>(number(j, "rms_norm_eps"));
  c.rope_theta = j.contains("rope_theta") ? number(j, "rope_theta") : 10000.0;
  c.tie_embeddings = flag("tie_word_embeddings", false);
  c.qk_norm = model_type == "qwen3" || model_type == "qwen3_moe";
  c.qkv_bias = model_type == "qwen2";  // HF's Qwen2Attention: q, k and v with biases, o without
  if (model_type == "qwen3_moe") {
    // Qwen3-MoE (HF's Qwen3MoeConfig; its defaults where a key is absent). Shared experts (Qwen2-MoE)
    // are not part of it and are refused.
    c.num_experts = size("num_experts", 4096);
    c.experts_per_token = size("num_experts_per_tok", 4096);
    c.d_expert = size("moe_intermediate_size", int64_t{1} << 18);
    c.norm_topk_prob = flag("norm_topk_prob", false);
    c.decoder_sparse_step = j.contains("decoder_sparse_step") ? size("decoder_sparse_step", 1024) : 1;
    for (const char* key : {"shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"})
      FP8RL_REQUIRE(!j.contains(key) || j[key].is_null() || j[key] == 0,
                    "{}: key '{}' (shared experts) is not supported: fp8rl implements Qwen3-MoE, which has none",
                    source, key);
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      const nlohmann::json& m = j["mlp_only_layers"];
      FP8RL_REQUIRE(m.is_array(), "{}: key 'mlp_only_layers' must be a list of layer indices, got {}", source,
                    m.dump());
      for (const nlohmann::json& l : m) {
        FP8RL_REQUIRE(l.is_number_integer(), "{}: key 'mlp_only_layers' must hold integers, got {}", source, l.dump());
        c.mlp_only_layers.push_back(l.get<int64_t>());
      }
    }
  } else {
    for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts"})
      FP8RL_REQUIRE(!j.contains(key) || j[key].is_null() || j[key] == 0,
                    "{}: key '{}' describes experts, but model_type '{}' is dense (Mixture of Experts is supported as "
                    "model_type qwen3_moe)",
                    source, key, model_type);
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& rs = j["rope_scaling"];
    FP8RL_REQUIRE(rs.is_object(), "{}: key 'rope_scaling' must be an object or null, got {}", source, rs.dump());
    const nlohmann::json& type = rs.contains("rope_type") ? rs["rope_type"] : rs.value("type", nlohmann::json());
    FP8RL_REQUIRE(type == "llama3", "{}: rope_scaling type {} is not supported (expected \"llama3\")", source,
                type.dump());
    c.rope_llama3_scaling = true;
    auto field = [&](const char* key, double fallback) { return rs.contains(key) ? number(rs, key) : fallback; };
    c.rope_scaling.factor = field("factor", 8.0);
    c.rope_scaling.low_freq_factor = field("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = field("high_freq_factor", 4.0);
    c.rope_scaling.original_max_position = field("original_max_position_embeddings", 8192.0);
    FP8RL_REQUIRE(c.rope_scaling.factor > 0 && c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
                    c.rope_scaling.low_freq_factor > 0 && c.rope_scaling.original_max_position > 0,
                "{}: rope_scaling {} needs factor > 0 and high_freq_factor > low_freq_factor > 0", source, rs.dump());
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  return c;
}

nlohmann::json read_json_file(const fs::path& path) {
  const std::string text = read_input_file(path, "file", kMaxJsonFileBytes);
  FP8RL_REQUIRE(json_nesting_depth(text) <= kMaxJsonDepth, "'{}' is not valid JSON here: nested deeper than {} levels",
                path.string(), kMaxJsonDepth);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}' is not valid JSON: {}", path.string(), e.what()));
  }
}

nlohmann::json read_hf_config_json(const fs::path& dir) {
  FP8RL_REQUIRE(fs::is_directory(dir), "model directory '{}' does not exist", dir.string());
  const fs::path path = dir / "config.json";
  FP8RL_REQUIRE(fs::exists(path), "model directory '{}' has no config.json", dir.string());
  return read_json_file(path);
}

nlohmann::json derived_hf_config_json(const ModelConfig& config, const fs::path& source_dir) {
  nlohmann::json base = nullptr;
  if (!source_dir.empty() && fs::exists(source_dir / "config.json")) base = read_json_file(source_dir / "config.json");
  nlohmann::json out = hf_config_json(config, base);
  if (source_dir.empty() || !fs::exists(source_dir / "tokenizer.json"))
    out["fp8rl_tokenizer"] = "char";
  else
    out.erase("fp8rl_tokenizer");
  return out;
}

bool uses_char_tokenizer(const nlohmann::json& config) {
  return config.is_object() && config.value("fp8rl_tokenizer", nlohmann::json()) == "char";
}

void copy_tokenizer_files(const fs::path& from, const fs::path& to) {
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "generation_config.json"})
    if (fs::exists(from / name)) fs::copy_file(from / name, to / name, fs::copy_options::overwrite_existing);
}

ModelConfig load_model_config(const fs::path& dir) {
  return model_config_from_hf_json(read_hf_config_json(dir), (dir / "config.json").string());
}

}  // namespace fp8rl
