#include "model/hf_weights.h"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/memory.h"
#include "core/timer.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "numerics/bf16.h"
#include "numerics/e4m3.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleFile = "model.safetensors";
constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kScaleSuffix = "_scale_inv";

// The open weight files of a directory and which file holds each tensor.
struct WeightFiles {
  std::vector<SafetensorsFile> files;
  std::map<std::string, size_t, std::less<>> file_of;  // tensor name -> index into files

  const SafetensorsFile* find(std::string_view name) const {
    const auto it = file_of.find(name);
    return it == file_of.end() ? nullptr : &files[it->second];
  }
};

WeightFiles open_weight_files(const fs::path& dir) {
  WeightFiles w;
  auto add_file = [&](const fs::path& path) {
    w.files.push_back(SafetensorsFile::open(path));
    const size_t index = w.files.size() - 1;
    for (const std::string& name : w.files.back().names()) {
      const auto [it, fresh] = w.file_of.emplace(name, index);
      FP8RL_REQUIRE(fresh, "model directory '{}': tensor '{}' is in both '{}' and '{}'", dir.string(), name,
                  w.files[it->second].path().filename().string(), path.filename().string());
    }
  };
  const fs::path index_path = dir / kIndexFile;
  if (!fs::exists(index_path)) {
    FP8RL_REQUIRE(fs::exists(dir / kSingleFile), "model directory '{}' has neither {} nor {}", dir.string(), kSingleFile,
                kIndexFile);
    add_file(dir / kSingleFile);
    return w;
  }
  const nlohmann::json index = read_json_file(index_path);
  FP8RL_REQUIRE(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
              "'{}': expected an object with a \"weight_map\" object", index_path.string());
  std::map<std::string, std::string> shard_of;  // tensor -> file name, as the index says
  for (const auto& [name, file] : index["weight_map"].items()) {
    FP8RL_REQUIRE(file.is_string(), "'{}': weight_map entry '{}' must be a file name, got {}", index_path.string(), name,
                file.dump());
    const std::string shard = file.get<std::string>();
    FP8RL_REQUIRE(!shard.empty() && shard.find('/') == std::string::npos && shard != "..",
                "'{}': weight_map entry '{}' names '{}', expected a file in the same directory", index_path.string(),
                name, shard);
    shard_of.emplace(name, shard);
  }
  std::vector<std::string> shards;
  for (const auto& [name, shard] : shard_of)
    if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
  std::sort(shards.begin(), shards.end());
  for (const std::string& shard : shards) {
    FP8RL_REQUIRE(fs::exists(dir / shard), "model directory '{}': shard '{}' named by {} is missing", dir.string(), shard,
                kIndexFile);
    add_file(dir / shard);
  }
  for (const auto& [name, shard] : shard_of) {
    const SafetensorsFile* f = w.find(name);
    FP8RL_REQUIRE(f != nullptr && f->path().filename() == shard, "model directory '{}': {} puts tensor '{}' in '{}', {}",
                dir.string(), kIndexFile, name, shard, f == nullptr ? "which does not hold it" : "but it is elsewhere");
  }
  return w;
}

// One parameter as the directory stores it: high precision, or FP8 codes with block scales.
struct StoredParam {
  const ParamInfo* param;
  const SafetensorsFile* file;
  const SafetensorsFile* scale_file = nullptr;  // FP8 only
  std::string scale_name;                       // FP8 only
};

ScaleShape block_scale_shape(const Shape& s) { return scale_shape(ScalingMode::kBlocks128x128, s[0], s[1]); }

// Checks every name, dtype and shape; reads nothing.
std::vector<StoredParam> plan_load(const fs::path& dir, const WeightFiles& w, const ParamLayout& layout,
                                   const ModelConfig& config) {
  std::vector<StoredParam> plan;
  std::map<std::string, bool, std::less<>> used;  // tensor name -> consumed
  for (const auto& [name, index] : w.file_of) used[name] = false;
  for (const ParamInfo& p : layout.tensors()) {
    const SafetensorsFile* f = w.find(p.name);
    FP8RL_REQUIRE(f != nullptr, "model directory '{}': missing tensor '{}' (shape {})", dir.string(), p.name, p.shape.str());
    used[p.name] = true;
    const SafetensorsTensorInfo& info = f->info(p.name);
    FP8RL_REQUIRE(info.shape == p.shape, "safetensors file '{}': tensor '{}' has shape {}, expected {}", f->path().string(),
                p.name, info.shape.str(), p.shape.str());
    StoredParam s{&p, f, nullptr, {}};
    if (info.dtype_name == "F8_E4M3") {
      FP8RL_REQUIRE(p.shape.rank == 2, "safetensors file '{}': tensor '{}' is F8_E4M3 but not a matrix", f->path().string(),
                  p.name);
      s.scale_name = p.name + kScaleSuffix;
      s.scale_file = w.find(s.scale_name);
      FP8RL_REQUIRE(s.scale_file != nullptr, "model directory '{}': F8_E4M3 tensor '{}' has no '{}'", dir.string(), p.name,
                  s.scale_name);
      used[s.scale_name] = true;
      const SafetensorsTensorInfo& si = s.scale_file->info(s.scale_name);
      const ScaleShape ss = block_scale_shape(p.shape);
      FP8RL_REQUIRE(si.dtype_name == "F32" && si.shape == (Shape{ss.rows, ss.cols}),
                  "safetensors file '{}': tensor '{}' must be F32 {} (one scale per 128x128 block), found {} {}",
                  s.scale_file->path().string(), s.scale_name, Shape{ss.rows, ss.cols}.str(), si.dtype_name,
                  si.shape.str());
    } else {
      FP8RL_REQUIRE(info.dtype_name == "F32" || info.dtype_name == "BF16" || info.dtype_name == "F16",
                  "safetensors file '{}': tensor '{}' has dtype {}, expected F32, BF16, F16 or F8_E4M3",
                  f->path().string(), p.name, info.dtype_name);
    }
    plan.push_back(s);
  }
  for (const auto& [name, consumed] : used) {
    if (consumed || ignored_stored_tensor(name, config)) continue;
    FP8RL_REQUIRE(false,
                  "safetensors file '{}': tensor '{}' has no place in this {} (config.json); fp8rl's Llama / Qwen2 / "
                  "Qwen3 / Qwen3-MoE models have no other parameters (biases only on Qwen2's q, k and v)",
                  w.find(name)->path().string(), name,
                  config.is_moe()    ? "Qwen3MoeForCausalLM"
                  : config.qk_norm   ? "Qwen3ForCausalLM"
                  : config.qkv_bias ? "Qwen2ForCausalLM"
                                     : "LlamaForCausalLM");
  }
  return plan;
}
std::vector<StoredParam> plan_load(const fs::path& dir, const WeightFiles& w, const Transformer& model) {
  return plan_load(dir, w, model.layout(), model.config());
}

// Reports a long load on stderr: after two seconds, a line redrawn in place on a terminal, or a
// line every ten seconds otherwise, then the total when it is done.
class LoadProgress {
 public:
  LoadProgress(const fs::path& dir, const std::vector<StoredParam>& plan) : dir_(dir) {
    for (const StoredParam& s : plan) {
      const SafetensorsTensorInfo& info = s.file->info(s.param->name);
      total_ += static_cast<int64_t>(info.end - info.begin);
    }
  }
  void add(const StoredParam& s) {
    const SafetensorsTensorInfo& info = s.file->info(s.param->name);
    done_ += static_cast<int64_t>(info.end - info.begin);
    const double t = clock_.seconds();
    if (t < 2.0 || (!terminal_ && t - last_ < 10.0) || (terminal_ && t - last_ < 0.2)) return;
    last_ = t;
    std::fprintf(stderr, "%sloading %s: %.0f%% (%.0f of %.0f MB) in %.1f s%s", terminal_ ? "\r" : "",
                 dir_.string().c_str(), 100.0 * static_cast<double>(done_) / static_cast<double>(std::max<int64_t>(total_, 1)),
                 static_cast<double>(done_) / 1e6, static_cast<double>(total_) / 1e6, t, terminal_ ? "" : "\n");
    std::fflush(stderr);
    shown_ = true;
  }
  ~LoadProgress() {
    if (!shown_) return;
    std::fprintf(stderr, "%sloaded %s: %.0f MB in %.1f s\n", terminal_ ? "\r" : "", dir_.string().c_str(),
                 static_cast<double>(total_) / 1e6, clock_.seconds());
  }

 private:
  fs::path dir_;
  int64_t total_ = 0, done_ = 0;
  Timer clock_;
  double last_ = 0;
  bool terminal_ = isatty(fileno(stderr)) != 0, shown_ = false;
};

// Stored weights must be finite: a NaN or an infinity (what a diverged run leaves) would only
// come back as NaN log-probs, far from its cause.
void require_finite(const StoredParam& s, bool finite) {
  FP8RL_REQUIRE(finite, "safetensors file '{}': tensor '{}' holds NaN or infinite values (weights of a diverged run?)",
                s.file->path().string(), s.param->name);
}

// The stored FP8 codes and 128x128 scales of `s` (an F8_E4M3 tensor).
QuantizedMatrix read_fp8(const StoredParam& s) {
  const int64_t rows = s.param->shape[0], cols = s.param->shape[1];
  QuantizedMatrix q(ScalingMode::kBlocks128x128, rows, cols);
  s.file->read_into(s.param->name, TensorView::contiguous(q.codes.data(), DType::kE4M3, s.param->shape));
  const ScaleShape ss = q.scales();
  s.scale_file->read_into(s.scale_name, TensorView::contiguous(q.scale_inv.data(), DType::kF32, Shape{ss.rows, ss.cols}));
  bool nan_code = false;  // E4M3 has no infinity; S.1111.111 is its NaN
  for (size_t i = 0; i < q.codes.size(); ++i) nan_code |= (q.codes[i] & 0x7f) == 0x7f;
  require_finite(s, !nan_code && all_finite(q.scale_inv.data(), static_cast<int64_t>(q.scale_inv.size())));
  return q;
}

// Rows [r0, r0 + n) of a stored FP8 matrix, dequantized into dst [n, cols].
void dequantize_rows(const QuantizedMatrix& q, int64_t r0, int64_t n, float* dst) {
  for (int64_t r = r0; r < r0 + n; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      dst[(r - r0) * q.cols + c] = e4m3_to_f32(q.codes[static_cast<size_t>(r * q.cols + c)]) * q.scale_at(r, c);
}

}  // namespace

void check_model_directory(const fs::path& dir, const ModelConfig& config, double bytes_per_param, const char* use) {
  const ParamLayout layout(config);
  plan_load(dir, open_weight_files(dir), layout, config);  // the headers only: names, shapes, dtypes
  const double need = static_cast<double>(layout.numel()) * bytes_per_param;
  const int64_t available = available_memory_bytes();
  FP8RL_REQUIRE(available <= 0 || need <= static_cast<double>(available),
                "model directory '{}': {} parameters need at least {:.1f} GiB for {} ({} bytes each), more than the "
                "{:.1f} GiB this machine has available",
                dir.string(), layout.numel(), need / static_cast<double>(int64_t{1} << 30), use, bytes_per_param,
                gib(available));
}

void load_model_weights(const fs::path& dir, Transformer& model) {
  const WeightFiles w = open_weight_files(dir);
  const std::vector<StoredParam> plan = plan_load(dir, w, model);
  LoadProgress progress(dir, plan);
  std::vector<std::pair<std::string, QuantizedMatrix>> fp8;  // installed after the refresh
  for (const StoredParam& s : plan) {
    float* dst = model.params() + s.param->offset;
    if (s.scale_file == nullptr) {
      s.file->read_as_f32(s.param->name, dst);
      require_finite(s, all_finite(dst, s.param->shape.numel()));
    } else {
      QuantizedMatrix q = read_fp8(s);
      dequantize_rows(q, 0, q.rows, dst);
      fp8.emplace_back(s.param->name, std::move(q));
    }
    progress.add(s);
  }
  model.refresh_weights();
  std::map<std::string, Precision> precision_of;
  for (const Transformer::NamedLinear& l : model.linears()) precision_of[l.name] = l.linear->precision();
  for (const auto& [name, q] : fp8)
    if (precision_of[name] == Precision::kFP8) model.install_fp8_weights(name, q);
}

Transformer load_frozen_model(const fs::path& dir, const PrecisionPolicy& policy, int64_t band_rows) {
  FP8RL_CHECK(band_rows > 0 && band_rows % kQuantBlock == 0, "load_frozen_model: band of {} rows (a multiple of 128)",
              band_rows);
  Transformer model = Transformer::frozen(load_model_config(dir), policy);
  const WeightFiles w = open_weight_files(dir);
  const std::vector<StoredParam> plan = plan_load(dir, w, model);
  LoadProgress progress(dir, plan);
  const ModelConfig& c = model.config();
  std::vector<float> f32;
  std::vector<bf16_t> bf16;
  for (const StoredParam& s : plan) {
    const std::string& name = s.param->name;
    const SafetensorsTensorInfo& info = s.file->info(name);
    if (s.param->shape.rank == 1) {
      s.file->read_as_f32(name, model.frozen_norm(name));
      require_finite(s, all_finite(model.frozen_norm(name), s.param->shape.numel()));
      progress.add(s);
      continue;
    }
    const bool embedding = s.param->role == TensorRole::kEmbedding;
    Linear* linear = !embedding || c.tie_embeddings ? &model.frozen_linear(name) : nullptr;
    const int64_t rows = s.param->shape[0], cols = s.param->shape[1];
    if (s.scale_file != nullptr && linear != nullptr && !embedding && linear->precision() == Precision::kFP8) {
      linear->install_fp8_weights(read_fp8(s));  // the stored bytes, as the trainable model installs them
      progress.add(s);
      continue;
    }
    std::optional<QuantizedMatrix> stored_fp8;
    if (s.scale_file != nullptr) stored_fp8 = read_fp8(s);
    for (int64_t r0 = 0; r0 < rows; r0 += band_rows) {
      const int64_t n = std::min(band_rows, rows - r0);
      if (!stored_fp8 && info.dtype_name == "BF16") {  // BF16 stays BF16 where the target is BF16
        bf16.resize(static_cast<size_t>(n * cols));
        s.file->read_rows(name, r0, n, bf16.data());
        bool non_finite = false;
        for (const bf16_t b : bf16) non_finite |= (b & 0x7f80) == 0x7f80;
        require_finite(s, !non_finite);
        if (embedding) model.set_frozen_embedding_rows_bf16(bf16.data(), r0, n);
        if (linear != nullptr) linear->set_frozen_rows_bf16(bf16.data(), r0, n);
        continue;
      }
      f32.resize(static_cast<size_t>(n * cols));
      if (stored_fp8) {
        dequantize_rows(*stored_fp8, r0, n, f32.data());
      } else {
        s.file->read_rows_as_f32(name, r0, n, f32.data());
        require_finite(s, all_finite(f32.data(), n * cols));
      }
      if (embedding) model.set_frozen_embedding_rows(f32.data(), r0, n);
      if (linear != nullptr) linear->set_frozen_rows(f32.data(), r0, n);
    }
    progress.add(s);
  }
  return model;
}

const char* hf_export_format_name(DType format) { return format == DType::kE4M3 ? "fp8" : "bf16"; }

void export_hf_model(const fs::path& dir, const Transformer& model, const HfExportOptions& options) {
  const bool fp8 = options.format == DType::kE4M3;
  std::map<std::string, const Linear*> linear_of;
  for (const Transformer::NamedLinear& l : model.linears()) linear_of[l.name] = l.linear;

  // Every tensor, in layout order, as a view into storage that lives until the files are written.
  struct Entry {
    std::string name;
    TensorView view;
  };
  std::vector<Entry> entries;
  std::vector<std::vector<bf16_t>> bf16_storage;
  std::vector<std::string> kept_bf16;  // linear modules not converted, for quantization_config
  for (const ParamInfo& p : model.layout().tensors()) {
    float* master = const_cast<float*>(model.params()) + p.offset;
    const auto lin = linear_of.find(p.name);
    const bool is_layer_linear = lin != linear_of.end() && fp8rl::is_layer_linear(p.role);
    if (fp8 && is_layer_linear && lin->second->precision() == Precision::kFP8) {
      const QuantizedMatrix& q = lin->second->fp8_weights().rowwise;
      FP8RL_REQUIRE(q.mode == ScalingMode::kBlocks128x128, "linear '{}': FP8 weights are {}, expected 128x128 blocks",
                  p.name, q.str());
      entries.push_back({p.name, TensorView::contiguous(const_cast<uint8_t*>(q.codes.data()), DType::kE4M3, p.shape)});
      const ScaleShape ss = q.scales();
      entries.push_back({p.name + kScaleSuffix, TensorView::contiguous(const_cast<float*>(q.scale_inv.data()),
                                                                       DType::kF32, Shape{ss.rows, ss.cols})});
      continue;
    }
    if (fp8 && (is_layer_linear || p.role == TensorRole::kLmHead)) kept_bf16.push_back(module_name(p.name));
    if (p.shape.rank == 1) {
      entries.push_back({p.name, TensorView::contiguous(master, DType::kF32, p.shape)});
      continue;
    }
    std::vector<bf16_t>& b = bf16_storage.emplace_back(static_cast<size_t>(p.shape.numel()));
    for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(master[i]);
    entries.push_back({p.name, TensorView::contiguous(b.data(), DType::kBF16, p.shape)});
  }
  // The head, a module of its own in HF's model, is the embedding here.
  if (fp8 && model.config().tie_embeddings) kept_bf16.push_back(module_name(tensor_name(TensorRole::kLmHead)));

  // Shards: consecutive tensors up to max_shard_bytes each.
  std::vector<std::vector<const Entry*>> shards(1);
  int64_t shard_bytes = 0, total_bytes = 0;
  for (const Entry& e : entries) {
    const int64_t bytes = e.view.numel() * static_cast<int64_t>(dtype_size(e.view.dtype));
    if (!shards.back().empty() && shard_bytes + bytes > options.max_shard_bytes) shards.emplace_back(), shard_bytes = 0;
    shards.back().push_back(&e);
    shard_bytes += bytes;
    total_bytes += bytes;
  }

  nlohmann::json config = derived_hf_config_json(model.config(), options.source_dir);
  config["torch_dtype"] = "bfloat16";
  config.erase("quantization_config");
  if (fp8) {
    config["quantization_config"] = {{"quant_method", "fp8"},
                                     {"fmt", "e4m3"},
                                     {"activation_scheme", "dynamic"},
                                     {"weight_block_size", {kQuantBlock, kQuantBlock}},
                                     {"modules_to_not_convert", kept_bf16},
                                     {"ignored_layers", kept_bf16}};
  }

  publish_directory_atomic(dir, [&](const fs::path& tmp) {
    write_file_atomic(tmp / "config.json", config.dump(2) + "\n");
    nlohmann::json weight_map = nlohmann::json::object();
    for (size_t s = 0; s < shards.size(); ++s) {
      const std::string file = shards.size() == 1 ? std::string(kSingleFile)
                                                  : fmt::format("model-{:05d}-of-{:05d}.safetensors", s + 1, shards.size());
      SafetensorsWriter writer;
      writer.set_metadata("format", "pt");
      for (const Entry* e : shards[s]) {
        writer.add(e->name, e->view);
        weight_map[e->name] = file;
      }
      writer.write(tmp / file);
    }
    if (shards.size() > 1) {
      const nlohmann::json index = {{"metadata", {{"total_size", total_bytes}}}, {"weight_map", weight_map}};
      write_file_atomic(tmp / kIndexFile, index.dump(2) + "\n");
    }
    if (!options.source_dir.empty()) copy_tokenizer_files(options.source_dir, tmp);
  });
}

}  // namespace fp8rl
