#include "model/checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <utility>
#include <vector>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// optimizer.safetensors: "exp_avg.NAME" and "exp_avg_sq.NAME" per parameter tensor.
constexpr std::pair<const char*, Moment> kMomentNames[] = {{"exp_avg.", Moment::kFirst},
                                                           {"exp_avg_sq.", Moment::kSecond}};
constexpr int64_t kLoadBandElements = int64_t{1} << 20;  // load_optimizer_state's pieces (4 MiB)

}  // namespace

void save_checkpoint(const fs::path& dir, const Transformer& model, const AdamW* optimizer,
                     const nlohmann::json& trainer_state, const fs::path& model_source) {
  // A diverged run's weights are never saved: the checkpoint at DIR stays the last good one.
  if (const ParamInfo* bad = first_non_finite_tensor(model.layout(), model.params()))
    throw Error(fmt::format("not writing checkpoint '{}': tensor '{}' holds NaN or infinite values (the run diverged; "
                            "the checkpoint there, if any, is the last good one)",
                            dir.string(), bad->name));
  nlohmann::json config = derived_hf_config_json(model.config(), model_source);
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
      SafetensorsWriter state;  // the moments streamed from wherever they live (an offloaded optimizer's spill file)
      for (const ParamInfo& p : model.layout().tensors())
        for (const auto& [prefix, moment] : kMomentNames)
          state.add_streamed(prefix + p.name, DType::kF32, p.shape, [=](int64_t first, int64_t n, void* dst) {
            optimizer->read_moment(moment, p.offset + first, n, static_cast<float*>(dst));
          });
      state.set_metadata("step", std::to_string(optimizer->steps_taken()));
      state.write(tmp / "optimizer.safetensors");
    }
    if (!trainer_state.is_null()) write_file_atomic(tmp / "trainer_state.json", trainer_state.dump(2) + "\n");
  });
}

void load_optimizer_state(const fs::path& dir, AdamW& optimizer) {
  const fs::path path = dir / "optimizer.safetensors";
  FP8RL_REQUIRE(fs::exists(path), "checkpoint '{}' has no optimizer state (optimizer.safetensors)", dir.string());
  const SafetensorsFile file = SafetensorsFile::open(path);
  FP8RL_REQUIRE(file.metadata().count("step") == 1, "safetensors file '{}': metadata 'step' missing", path.string());
  // A shard's optimizer (rl/data_parallel.h) keeps the part of each tensor inside its range. Read in bands of
  // rows, so that an offloaded optimizer's moments never sit in memory whole.
  const int64_t begin = optimizer.begin(), end = optimizer.end();
  std::vector<float> band;
  for (const ParamInfo& p : optimizer.tensors()) {
    const int64_t n = p.shape.numel(), b = std::max(begin, p.offset), e = std::min(end, p.offset + n);
    if (b >= e) continue;
    const int64_t rows = p.shape.rank == 0 ? 1 : p.shape[0], row = rows == 0 ? 0 : n / rows;
    const int64_t band_rows = std::max<int64_t>(1, kLoadBandElements / std::max<int64_t>(row, 1));
    for (const auto& [prefix, moment] : kMomentNames) {
      const std::string name = prefix + p.name;
      file.expect(name, DType::kF32, p.shape);
      // The rows that hold elements [b, e) of the tensor's [p.offset, p.offset + n).
      for (int64_t r0 = (b - p.offset) / row; r0 * row < e - p.offset; r0 += band_rows) {
        const int64_t r1 = std::min(rows, r0 + band_rows);
        band.resize(static_cast<size_t>((r1 - r0) * row));
        file.read_rows(name, r0, r1 - r0, band.data());
        const int64_t lo = std::max(b, p.offset + r0 * row), hi = std::min(e, p.offset + r1 * row);
        optimizer.write_moment(moment, lo, hi - lo, band.data() + (lo - p.offset - r0 * row));
      }
    }
  }
  const std::string& step = file.metadata().at("step");
  int64_t steps = -1;
  const std::from_chars_result parsed = std::from_chars(step.data(), step.data() + step.size(), steps);
  FP8RL_REQUIRE(parsed.ec == std::errc() && parsed.ptr == step.data() + step.size() && steps >= 0,
                "safetensors file '{}': metadata 'step' must be a non-negative integer, got '{}'", path.string(), step);
  optimizer.set_steps_taken(steps);
}

nlohmann::json load_trainer_state(const fs::path& dir) {
  const fs::path path = dir / "trainer_state.json";
  if (!fs::exists(path)) return nullptr;
  nlohmann::json state = read_json_file(path);
  FP8RL_REQUIRE(state.is_object(), "'{}': expected a JSON object, got {}", path.string(), state.type_name());
  return state;
}

int64_t trainer_state_step(const nlohmann::json& state, const fs::path& dir, const char* key, int64_t max_steps) {
  const fs::path path = dir / "trainer_state.json";
  FP8RL_REQUIRE(state.is_object() && state.contains(key), "'{}': missing key '{}'", path.string(), key);
  const nlohmann::json& v = state.at(key);
  FP8RL_REQUIRE(v.is_number_integer() && v.get<int64_t>() >= 0, "'{}': key '{}' must be a non-negative integer, got {}",
                path.string(), key, v.dump());
  const int64_t step = v.get<int64_t>();
  FP8RL_REQUIRE(step <= max_steps,
                "'{}': the checkpoint is at step {}, beyond this run's {} steps (raise the recipe's max_num_steps to "
                "continue it)",
                path.string(), step, max_steps);
  return step;
}

}  // namespace fp8rl
