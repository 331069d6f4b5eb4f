// The small model, trainers and prompts the generation tests share.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/rng.h"
#include "generation/engine.h"
#include "model/transformer.h"

namespace fp8rl::testing {

inline constexpr int32_t kPad = 0, kBos = 1, kEos = 2;

// 2 layers of width 128, 4 query heads over 2 KV heads of 32, vocabulary 40.
inline ModelConfig engine_test_config(bool qk_norm) {
  ModelConfig c;
  c.preset = "test";
  c.vocab_size = 40, c.d_model = 128, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 32;
  c.d_ff = 256, c.max_seq_len = 48, c.qk_norm = qk_norm;
  return c;
}

// A trainer whose random weights are multiplied by `sharpen` (norm weights 1), so that its
// distributions are far from uniform.
inline Transformer make_sharpened_trainer(const ModelConfig& c, Precision linear, uint64_t seed, float sharpen,
                                          Precision attention = Precision::kF32) {
  PrecisionPolicy p;
  p.linear = linear;
  p.attention = attention;
  Transformer t(c, p);
  t.init_random(seed);
  for (int64_t i = 0; i < t.num_params(); ++i) t.params()[i] *= sharpen;
  for (const ParamInfo& info : t.layout().tensors())
    if (info.shape.rank == 1) std::fill(t.params() + info.offset, t.params() + info.offset + info.shape.numel(), 1.0f);
  t.refresh_weights();
  return t;
}

// `n` prompts: <bos> and 2 to 7 random tokens of ids 3..39.
inline std::vector<std::vector<int32_t>> make_random_prompts(int n, uint64_t seed) {
  std::vector<std::vector<int32_t>> prompts;
  RandomStream rng(seed, 0);
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = {kBos};
    const int len = 2 + static_cast<int>(rng.next_below(6));
    for (int j = 0; j < len; ++j) p.push_back(3 + static_cast<int32_t>(rng.next_below(37)));
    prompts.push_back(p);
  }
  return prompts;
}

// Sampling at temperature 1 (the default) with `seed`, up to `max_new` tokens, stopping at `eos`.
inline GenerateOptions sampling_options(int64_t max_new, uint64_t seed, int32_t eos = kEos) {
  GenerateOptions o;
  o.max_new_tokens = max_new;
  o.sampling.seed = seed;
  o.eos = eos;
  return o;
}

}  // namespace fp8rl::testing
