// The refit: the only place where weights move from the trainer to the generator
// (docs/recipe.md section 6).
//
//  1. Weights: every linear's bytes for this step — the trainer's own 128x128 FP8 quantization
//     when the trainer runs the layer in FP8 (one quantization, two consumers), its BF16 copy
//     when it runs in BF16 — plus the FP32 masters for everything else; the generator repacks
//     them into its layout in place.
//  2. KV scales (FP8 KV cache only): scale = 1.05 * amax / 448 per layer (or per KV head) for
//     each of Q, K, V, from the amax the trainer recorded (after q/k-norm and RoPE) in a forward
//     with the new weights; validated (finite, positive) before the generator may run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "generation/engine.h"
#include "model/transformer.h"
#include "core/communicator.h"

namespace fp8rl {

// Pointers into the trainer's current masters and low-precision copies (valid until the
// trainer's next refresh_weights).
GeneratorWeightSource generator_weight_source(const Transformer& trainer);

// Copies this step's weights into the generator, in place.
void refit_generator_weights(const Transformer& trainer, GenerationEngine& generator);

// The KV calibration over `sequences` (the real tokens of each, at positions 0, 1, ...): the
// per-layer amax that trainer forwards over all of them would record, bit for bit, computed by
// Transformer::qkv_amax over batches of at most `max_batch` sequences. Each distinct sequence is
// calibrated once (and none that is a prefix of another: its rows are the other's first rows);
// sorting them puts duplicates and shared prompts in the same batch, where they are computed once.
// Under a communicator of several ranks, batch i runs on rank i % N and the maxima are gathered.
std::vector<Transformer::QkvAmax> calibrate_qkv_amax(Transformer& trainer, std::vector<std::vector<int32_t>> sequences,
                                                     int64_t max_batch, int32_t pad,
                                                     const dist::Communicator& comm = dist::world());

// How many Q/K/V scales the FP8 KV cache gets (generation.kv_scale_granularity).
enum class KvScaleGranularity : uint8_t {
  kLayer,  // one q, k, v scale per layer (docs/recipe.md section 6)
  kHead,   // one k and v scale per KV head; q per KV head's GQA group of query heads
};
const char* kv_scale_granularity_name(KvScaleGranularity g);

// 1.05 * amax / 448 per layer (and per head with KvScaleGranularity::kHead: k and v from each KV
// head's amax, q from the largest amax of the query heads of its group) from the amax of the
// trainer's calibration forward. Throws if an amax is zero or not finite (the calibration batch
// was empty or the model diverged).
// `margin` (generation.kv_scale_margin) replaces the recipe's 1.05 where given.
std::vector<QkvScales> kv_scales_from_amax(const std::vector<Transformer::QkvAmax>& amax,
                                           KvScaleGranularity granularity = KvScaleGranularity::kLayer,
                                           float margin = 1.05f);

// The trainer's view of the generator's scales (policy.fp8_kv_attention): per layer, one q (when
// `fp8_attention`), k and v scale per KV head (the layer's scale for each head with per-layer
// scales).
std::vector<Transformer::AttentionE4m3Scales> attention_e4m3_scales(const std::vector<QkvScales>& scales,
                                                                    int64_t n_kv_heads, bool fp8_attention);

}  // namespace fp8rl
