#include "model/checkpoint.h"

#include <fmt/format.h>

#include <fstream>
#include <sstream>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"

namespace fp8rl {

namespace fs = std::filesystem;

nlohmann::json hf_config_json(const ModelConfig& c) {
  nlohmann::json j;
  j["architectures"] = {c.qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = c.qk_norm ? "qwen3" : "llama";
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
  j["torch_dtype"] = "float32";
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
  auto get = [&](const char* key) -> const nlohmann::json& {
    FP8RL_CHECK(j.contains(key), "{}: missing key '{}'", source, key);
    return j.at(key);
  };
  auto integer = [&](const char* key) {
    const nlohmann::json& v = get(key);
    FP8RL_CHECK(v.is_number_integer(), "{}: key '{}' must be an integer, got {}", source, key, v.dump());
    return v.get<int64_t>();
  };
  auto number = [&](const char* key) {
    const nlohmann::json& v = get(key);
    FP8RL_CHECK(v.is_number(), "{}: key '{}' must be a number, got {}", source, key, v.dump());
    return v.get<double>();
  };
  ModelConfig c;
  c.preset = j.value("fp8rl_preset", std::string("custom"));
  c.vocab_size = integer("vocab_size");
  c.d_model = integer("hidden_size");
  c.d_ff = integer("intermediate_size");
  c.n_layers = integer("num_hidden_layers");
  c.n_heads = integer("num_attention_heads");
  c.n_kv_heads = j.contains("num_key_value_heads") ? integer("num_key_value_heads") : c.n_heads;
  c.head_dim = j.contains("head_dim") ? integer("head_dim") : c.d_model / std::max<int64_t>(1, c.n_heads);
  c.max_seq_len = integer("max_position_embeddings");
  c.norm_eps = static_cast<float>(number("rms_norm_eps"));
  c.rope_theta = j.contains("rope_theta") ? number("rope_theta") : 10000.0;
  c.tie_embeddings = j.value("tie_word_embeddings", false);
  const std::string model_type = j.value("model_type", std::string("llama"));
  FP8RL_CHECK(model_type == "llama" || model_type == "qwen3",
              "{}: model_type '{}' is not supported (expected llama or qwen3)", source, model_type);
  c.qk_norm = model_type == "qwen3";
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    const nlohmann::json& rs = j["rope_scaling"];
    const std::string type = rs.value("rope_type", rs.value("type", std::string()));
    FP8RL_CHECK(type == "llama3", "{}: rope_scaling type '{}' is not supported (expected llama3)", source, type);
    c.rope_llama3_scaling = true;
    c.rope_scaling.factor = rs.value("factor", 8.0);
    c.rope_scaling.low_freq_factor = rs.value("low_freq_factor", 1.0);
    c.rope_scaling.high_freq_factor = rs.value("high_freq_factor", 4.0);
    c.rope_scaling.original_max_position = rs.value("original_max_position_embeddings", 8192.0);
  }
  try {
    c.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", source, e.what()));
  }
  return c;
}

namespace {
nlohmann::json read_json_file(const fs::path& path) {
  std::ifstream in(path);
  FP8RL_CHECK(in.good(), "cannot open '{}'", path.string());
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("'{}' is not valid JSON: {}", path.string(), e.what()));
  }
}
}  // namespace

void save_checkpoint(const fs::path& dir, const Transformer& model, const AdamW* optimizer,
                     const nlohmann::json& trainer_state) {
  publish_directory_atomic(dir, [&](const fs::path& tmp) {
    write_file_atomic(tmp / "config.json", hf_config_json(model.config()).dump(2) + "\n");
    SafetensorsWriter weights;
    weights.set_metadata("format", "pt");
    for (const ParamInfo& p : model.layout().tensors())
      weights.add(p.name, TensorView::contiguous(const_cast<float*>(model.params()) + p.offset, DType::kF32, p.shape));
    weights.write(tmp / "model.safetensors");
    if (optimizer != nullptr) {
      SafetensorsWriter state;
      auto& opt = const_cast<AdamW&>(*optimizer);
      for (const ParamInfo& p : model.layout().tensors()) {
        state.add("exp_avg." + p.name, TensorView::contiguous(opt.first_moment().data() + p.offset, DType::kF32, p.shape));
        state.add("exp_avg_sq." + p.name, TensorView::contiguous(opt.second_moment().data() + p.offset, DType::kF32, p.shape));
      }
      state.set_metadata("step", std::to_string(optimizer->steps_taken()));
      state.write(tmp / "optimizer.safetensors");
    }
    if (!trainer_state.is_null()) write_file_atomic(tmp / "trainer_state.json", trainer_state.dump(2) + "\n");
  });
}

ModelConfig load_model_config(const fs::path& dir) {
  FP8RL_CHECK(fs::is_directory(dir), "checkpoint directory '{}' does not exist", dir.string());
  const fs::path path = dir / "config.json";
  FP8RL_CHECK(fs::exists(path), "checkpoint '{}' has no config.json", dir.string());
  return model_config_from_hf_json(read_json_file(path), path.string());
}

void load_model_weights(const fs::path& dir, Transformer& model) {
  const SafetensorsFile file = SafetensorsFile::open(dir / "model.safetensors");
  for (const ParamInfo& p : model.layout().tensors()) {
    FP8RL_CHECK(file.contains(p.name), "safetensors file '{}': missing tensor '{}' (shape {})", file.path().string(),
                p.name, p.shape.str());
    const Tensor t = file.read(p.name);
    FP8RL_CHECK(t.shape() == p.shape, "safetensors file '{}': tensor '{}' has shape {}, expected {}",
                file.path().string(), p.name, t.shape().str(), p.shape.str());
    float* dst = model.params() + p.offset;
    if (t.dtype() == DType::kF32) {
      std::copy(t.data<float>(), t.data<float>() + t.numel(), dst);
    } else {
      FP8RL_CHECK(t.dtype() == DType::kBF16, "safetensors file '{}': tensor '{}' has dtype {}, expected F32 or BF16",
                  file.path().string(), p.name, dtype_name(t.dtype()));
      for (int64_t i = 0; i < t.numel(); ++i) dst[i] = bf16_to_f32(t.data<bf16_t>()[i]);
    }
  }
  model.refresh_weights();
}

void load_optimizer_state(const fs::path& dir, AdamW& optimizer) {
  const fs::path path = dir / "optimizer.safetensors";
  FP8RL_CHECK(fs::exists(path), "checkpoint '{}' has no optimizer state (optimizer.safetensors)", dir.string());
  const SafetensorsFile file = SafetensorsFile::open(path);
  FP8RL_CHECK(file.metadata().count("step") == 1, "safetensors file '{}': metadata 'step' missing", path.string());
  for (const ParamInfo& p : optimizer.tensors()) {
    file.read_into("exp_avg." + p.name,
                   TensorView::contiguous(optimizer.first_moment().data() + p.offset, DType::kF32, p.shape));
    file.read_into("exp_avg_sq." + p.name,
                   TensorView::contiguous(optimizer.second_moment().data() + p.offset, DType::kF32, p.shape));
  }
  optimizer.set_steps_taken(std::stoll(file.metadata().at("step")));
}

nlohmann::json load_trainer_state(const fs::path& dir) {
  const fs::path path = dir / "trainer_state.json";
  if (!fs::exists(path)) return nullptr;
  return read_json_file(path);
}

}  // namespace fp8rl
