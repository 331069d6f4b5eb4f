#include "model/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

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
      FP8RL_CHECK(optimizer->begin() == 0 && optimizer->end() == model.num_params(),
                  "save_checkpoint: the optimizer holds a shard [{}, {}) of {} parameters, not all of them",
                  optimizer->begin(), optimizer->end(), model.num_params());
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
  // A shard's optimizer (rl/dist) keeps the part of each tensor inside its range.
  const int64_t begin = optimizer.begin(), end = optimizer.end();
  std::vector<float> whole;
  for (const ParamInfo& p : optimizer.tensors()) {
    const int64_t n = p.shape.numel(), b = std::max(begin, p.offset), e = std::min(end, p.offset + n);
    if (b >= e) continue;
    for (const auto& [prefix, moment] : {std::pair{"exp_avg.", &optimizer.first_moment()},
                                         std::pair{"exp_avg_sq.", &optimizer.second_moment()}}) {
      if (b == p.offset && e == p.offset + n) {  // the whole tensor: straight into place
        file.read_into(prefix + p.name, TensorView::contiguous(moment->data() + (p.offset - begin), DType::kF32, p.shape));
        continue;
      }
      whole.resize(static_cast<size_t>(n));
      file.read_into(prefix + p.name, TensorView::contiguous(whole.data(), DType::kF32, p.shape));
      std::copy(whole.begin() + (b - p.offset), whole.begin() + (e - p.offset), moment->data() + (b - begin));
    }
  }
  optimizer.set_steps_taken(std::stoll(file.metadata().at("step")));
}

nlohmann::json load_trainer_state(const fs::path& dir) {
  const fs::path path = dir / "trainer_state.json";
  if (!fs::exists(path)) return nullptr;
  return read_json_file(path);
}

}  // namespace fp8rl
