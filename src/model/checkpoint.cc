#include "model/checkpoint.h"

#include <fmt/format.h>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace fp8rl {

namespace fs = std::filesystem;

void save_checkpoint(const fs::path& dir, const Transformer& model, const AdamW* optimizer,
                     const nlohmann::json& trainer_state, const fs::path& model_source) {
  nlohmann::json base = nullptr;
  if (!model_source.empty() && fs::exists(model_source / "config.json")) base = read_json_file(model_source / "config.json");
  nlohmann::json config = hf_config_json(model.config(), base);
  config["torch_dtype"] = "float32";
  config.erase("quantization_config");  // the masters are FP32 whatever the source stored
  publish_directory_atomic(dir, [&](const fs::path& tmp) {
    write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
    if (!model_source.empty()) copy_tokenizer_files(model_source, tmp);
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
