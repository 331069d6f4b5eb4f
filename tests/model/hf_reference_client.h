// What the tests against tools/oracles/hf_reference.py share: running the reference, the token
// batch it reads, fp8rl's and the reference's outputs, and their largest differences.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "io/safetensors.h"
#include "model/hf_config.h"
#include "model/hf_weights.h"
#include "model/transformer.h"

namespace fp8rl::testing {

// Runs hf_reference.py's commands ("CMD ARGS ; CMD ARGS ...") in one Python process.
inline void run_reference(const std::string& commands) {
  const std::string cmd =
      "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/hf_reference.py each -- " + commands + " > /dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference failed: " << cmd << " (is python3-torch installed?)";
}

// B right-padded sequences of random tokens; every real position but the last scores the next
// token.
inline TokenBatch random_batch(int64_t vocab, const std::vector<int32_t>& lengths, int64_t T, uint64_t seed) {
  TokenBatch b = TokenBatch::empty(static_cast<int64_t>(lengths.size()), T, 0);
  RandomStream rng(seed, 0);
  for (size_t s = 0; s < lengths.size(); ++s) {
    const size_t row = s * static_cast<size_t>(T);
    b.lengths[s] = lengths[s];
    for (int32_t t = 0; t < lengths[s]; ++t)
      b.tokens[row + static_cast<size_t>(t)] = static_cast<int32_t>(rng.next_below(static_cast<uint64_t>(vocab)));
    for (int32_t t = 0; t + 1 < lengths[s]; ++t) b.targets[row + static_cast<size_t>(t)] = b.tokens[row + static_cast<size_t>(t) + 1];
  }
  return b;
}

inline void write_batch(const std::filesystem::path& path, TokenBatch& b) {
  SafetensorsWriter w;
  w.add("tokens", TensorView::contiguous(b.tokens.data(), DType::kI32, Shape{b.B, b.T}));
  w.add("targets", TensorView::contiguous(b.targets.data(), DType::kI32, Shape{b.B, b.T}));
  w.add("lengths", TensorView::contiguous(b.lengths.data(), DType::kI32, Shape{b.B}));
  w.write(path);
}

struct Outputs {
  std::vector<float> logprobs, logits;  // [B*T], [B*T*V]
  std::vector<float> route_margin;      // [B*T] the reference's, for MoE models (else empty)
};

inline Outputs fp8rl_forward(Transformer& model, const TokenBatch& b) {
  Outputs o;
  o.logprobs.resize(static_cast<size_t>(b.B * b.T));
  model.forward(b, o.logprobs.data(), /*for_backward=*/false);
  std::vector<int64_t> rows(static_cast<size_t>(b.B * b.T));
  for (size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<int64_t>(i);
  o.logits.resize(rows.size() * static_cast<size_t>(model.config().vocab_size));
  model.logits(rows, o.logits.data());
  return o;
}

inline Outputs fp8rl_forward(const std::filesystem::path& dir, const PrecisionPolicy& policy, const TokenBatch& b) {
  Transformer model(load_model_config(dir), policy);
  load_model_weights(dir, model);
  return fp8rl_forward(model, b);
}

inline Outputs reference_outputs(const std::filesystem::path& path) {
  const SafetensorsFile f = SafetensorsFile::open(path);
  const auto floats = [&](const char* name) {
    const Tensor t = f.read(name);
    return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
  };
  return {floats("logprobs"), floats("logits"), f.contains("route_margin") ? floats("route_margin") : std::vector<float>()};
}

// Largest |fp8rl - reference| over the real positions (logits) and the scored ones (log-probs),
// and for MoE models the smallest router margin of the reference over the real positions.
struct MaxError {
  double logits = 0, logprobs = 0, margin = std::numeric_limits<double>::infinity();
};
inline MaxError compare(const Outputs& got, const Outputs& want, const TokenBatch& b, int64_t V) {
  MaxError e;
  for (int64_t s = 0; s < b.B; ++s)
    for (int64_t t = 0; t < b.lengths[static_cast<size_t>(s)]; ++t) {
      const size_t n = static_cast<size_t>(s * b.T + t);
      for (int64_t v = 0; v < V; ++v)
        e.logits = std::max(e.logits, std::fabs(double(got.logits[n * V + v]) - want.logits[n * V + v]));
      if (b.targets[n] >= 0) e.logprobs = std::max(e.logprobs, std::fabs(double(got.logprobs[n]) - want.logprobs[n]));
      if (!want.route_margin.empty()) e.margin = std::min(e.margin, double(want.route_margin[n]));
    }
  return e;
}

// fp8rl computes in FP32 what the reference computes in float64 from the same stored values;
// over a few layers of width 64 the differences stay near 1e-6, far below this bound.
constexpr double kReferenceTolerance = 1e-4;

}  // namespace fp8rl::testing
