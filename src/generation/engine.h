// The rollout generator: prefill and batched decode of many sequences with BF16 or FP8 weights,
// a BF16 or FP8 KV cache, shared prompt prefixes, continuous batching, and sampling with exact
// log-probs. It is a separate engine from the trainer, with its own weight layout (the packed
// GEMV layout of kernels/gemv/gemv.h), fed only by the refit step (rl/refit).
//
// Numerics: every operator is the trainer's (rmsnorm, rope, swiglu, attention_row, the GEMM/GEMV
// pair whose rows are bit-identical, token log-probs), applied per token row at the same BF16
// rounding points (docs/model.md). So with BF16 weights, or FP8 weights and W8A8, and a BF16 KV
// cache, the log-prob of every sampled token equals the trainer's recomputed one bit for bit.
// With an FP8 KV cache, K and V are stored as e4m3(x / scale); with FP8 attention, Q is also
// quantized (e4m3(q / q_scale)) and score = dot(q_codes, k_codes) * q_scale * k_scale / sqrt(D);
// the output is (sum_j p_j v_codes_j) * v_scale. Dot products and sums are FP32. The scales are
// the layer's, or with per-head scales those of the KV head (its GQA group of query heads share
// its q_scale).
//
// Admission: a sample starts only when pages for its whole prompt + max_new_tokens are free;
// otherwise it waits for running samples to finish (GenerationStats::kv_waited counts it). A
// sequence is never cut short for lack of KV memory; one that cannot fit even alone is an error.
//
// Mixture-of-Experts layers route with the trainer's router code (model/moe_routing.h: FP32
// logits, softmax, top-k with a fixed tie order, the FP32 combine in slot order) over router
// logits that are the trainer's bit for bit, so every token goes to the trainer's experts.
//
// Uses the architecture and precision-policy types of model/ (config.h, precision.h,
// moe_routing.h), never the trainer itself.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "generation/kv_cache.h"
#include "generation/sampling.h"
#include "generation/turn_handler.h"
#include "kernels/gemv/gemv.h"
#include "arch/config.h"
#include "model/moe_routing.h"
#include "arch/precision.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl {

// What the refit hands over for one linear W [N, K]: `fp8`, the trainer's 128x128 quantization
// of this step when the trainer runs the layer in FP8, `bf16` its BF16 copy when it runs in BF16,
// `f32` the master (absent for a frozen source). The generator reads `fp8` and `bf16` in place
// (its GEMM path multiplies by those very bytes, no second copy) and packs them into its own GEMV
// layout; only from `f32` does it make row-major weights of its own.
struct LinearWeightSource {
  const float* f32 = nullptr;
  const QuantizedMatrix* fp8 = nullptr;
  const bf16_t* bf16 = nullptr;
  const float* bias = nullptr;  // [N] FP32 (Qwen2's q, k, v), copied; nullptr: none
};

struct LayerWeightSource {
  const float* attn_norm = nullptr;               // [C]
  const float* mlp_norm = nullptr;                // [C]
  const float* q_norm = nullptr;                  // [D] (q/k-norm models)
  const float* k_norm = nullptr;                  // [D]
  LinearWeightSource q, k, v, o, gate, up, down;  // gate, up, down: a dense MLP's
  // An MoE layer's MLP instead (config.is_moe_layer): the router [E, C] (FP32) and each expert's
  // linears.
  LinearWeightSource router;
  std::vector<LinearWeightSource> expert_gate, expert_up, expert_down;  // [E]
};

struct GeneratorWeightSource {
  const float* embed = nullptr;        // [V, C] FP32 masters (absent for a frozen source)
  const bf16_t* embed_bf16 = nullptr;  // [V, C] the same rounded to BF16 (read in place when set)
  std::vector<LayerWeightSource> layers;
  const float* final_norm = nullptr;  // [C]
  LinearWeightSource lm_head;         // [V, C]
};

struct EngineOptions {
  DType kv_dtype = DType::kBF16;
  bool fp8_attention = true;          // with an FP8 KV cache: quantize Q too
  int64_t kv_cache_bytes = 64 << 20;  // K/V storage budget
  int64_t max_num_seqs = 64;          // sequences decoded together
  // On: every linear's rows are the trainer's GEMM rows bit for bit, whatever the batch (exact
  // generator/trainer agreement). Off: a lone sequence's decode may take the GEMV's faster
  // non-invariant path (kernels/gemv/gemv.h), whose bits differ from the trainer's in the last place.
  bool batch_invariant = true;
};

struct GenerateOptions {
  int64_t max_new_tokens = 16;  // including the eos
  SamplingParams sampling;
  int32_t eos = 2;
  uint64_t first_sequence_index = 0;  // sequence (prompt p, sample g) draws from stream first + p*G + g
  bool share_prefix = true;           // the G samples of a prompt share its prefill and KV entries
  // Multi-turn (generation/turn_handler.h): observations between the model's turns, all within
  // max_new_tokens. nullptr: one turn, ended by eos or max_new_tokens.
  TurnHandler* turns = nullptr;
};

enum class FinishReason : uint8_t { kStop, kLength };

struct GeneratedSequence {
  int64_t prompt_index = 0;
  int64_t sample_index = 0;
  std::vector<int32_t> tokens;   // generated tokens, the eos included when it was generated
  std::vector<float> logprobs;   // log-prob of each token under the distribution it was drawn from
  FinishReason finish = FinishReason::kLength;
  // Multi-turn only: 1 where the token is an observation (prefilled, not sampled; its logprobs
  // entry is 0), 0 where the model sampled it; and how many turns the handler was asked about.
  std::vector<uint8_t> observation;
  int64_t turns = 0;
  // MoE models: the experts each input position was routed to, [positions, MoE layers, k] slots
  // best first, for positions 0 .. prompt + tokens - 2 (every token the model read; the last
  // generated token is never read). Empty for a dense model.
  std::vector<uint16_t> routing;
};

struct GenerationStats {
  int64_t prefill_tokens = 0;
  int64_t decode_tokens = 0;
  int64_t decode_steps = 0;
  int64_t peak_active = 0;
  // Sequences that waited for KV pages: a free decode slot (max_num_seqs) but not enough free
  // pages for prompt + max_new_tokens, so admitted later, whole, never truncated.
  int64_t kv_waited = 0;
  double prefill_seconds = 0;  // wall time of the prefill forwards (benchmarks)
  double decode_seconds = 0;   // wall time of the decode forwards and their sampling
  // Multi-turn: observation tokens prefilled, and the wall time spent waiting for answers with
  // no sample left to decode.
  int64_t observation_tokens = 0;
  double turn_wait_seconds = 0;
};

class GenerationEngine {
 public:
  GenerationEngine(const ModelConfig& config, const PrecisionPolicy& policy, const EngineOptions& options);

  const ModelConfig& config() const { return config_; }
  const PrecisionPolicy& policy() const { return policy_; }
  const KvCache& kv_cache() const { return kv_; }
  Precision linear_precision(int64_t layer, int64_t index) const;  // index: q k v o gate up down

  // Refit: repacks the weights into the engine's GEMV buffers in place (no reallocation after the
  // first call) and keeps pointers to the source's BF16 / FP8 row-major bytes and BF16 embedding,
  // which must stay valid and unchanged until the next update_weights (the trainer's copies: the
  // trainer rewrites them only in refresh_weights, which a refit follows). With an FP8 KV cache,
  // the scales are invalidated: the caller must set_kv_scales for the new weights before generating.
  void update_weights(const GeneratorWeightSource& source);
  // Returns what the engine holds between generations to the system: the KV cache's pages, its
  // packed weights and its activation scratch. The next update_weights packs the weights again;
  // generate() refuses until then. (GRPO calls it after the step's generation: the trainer's
  // phases do not need the generator's memory.)
  void release_memory();
  // Validated (finite, > 0; q too with FP8 attention) per-layer scales, per-head where given.
  void set_kv_scales(const std::vector<QkvScales>& scales);

  // Generates `samples_per_prompt` responses to every prompt (token ids starting with bos).
  // Results are ordered prompt-major, sample-minor, and do not depend on batch composition.
  std::vector<GeneratedSequence> generate(const std::vector<std::vector<int32_t>>& prompts,
                                          int64_t samples_per_prompt, const GenerateOptions& options);
  const GenerationStats& last_stats() const { return stats_; }

  // The logits [V] of the positions first_row .. of `tokens` (one forward through the engine, no
  // sampling; the rows' bits are decode's): teacher forcing (`fp8rl score`), tests, diagnostics.
  std::vector<float> prompt_logits(const std::vector<int32_t>& tokens, int64_t first_row = 0);

 private:
  struct EngineLinear {
    Precision precision = Precision::kBF16;
    PackedGemvWeights packed;         // BF16 or FP8 weights in the GEMV layout
    // The same weights row-major, for forwards of more than kGemvMaxRows rows (prefill, large
    // decode batches), which run through the GEMM: its rows are bit-identical to the GEMV's. The
    // source's bytes where it has them (bf16_rows / fp8_rows point there), else the own_* copies.
    const bf16_t* bf16_rows = nullptr;         // [N, K]
    const QuantizedMatrix* fp8_rows = nullptr;  // [N, K] codes, 128x128 scales
    AlignedBuffer<bf16_t> own_bf16;
    QuantizedTensor own_fp8;
    AlignedBuffer<float> f32;         // FP32 weights (FP32 LM head only)
    AlignedBuffer<float> bias;        // [N], empty without a bias
    int64_t N = 0, K = 0;
  };
  struct EngineLayer {
    AlignedBuffer<float> attn_norm, mlp_norm, q_norm, k_norm;
    EngineLinear lin[7];  // q k v o gate up down (gate, up, down unused in an MoE layer)
    bool moe = false;
    int64_t moe_index = 0;  // among the MoE layers
    EngineLinear router;    // an MoE layer's
    std::vector<EngineLinear> expert_gate, expert_up, expert_down;
  };
  // One token row of a forward: the sequence it belongs to and its position.
  struct Row {
    const KvBlockList* prefix;  // shared prompt pages (nullptr: none)
    int64_t prefix_len;
    KvBlockList* own;           // pages for positions >= prefix_len
    int64_t pos;
    int32_t token;
    uint16_t* routing = nullptr;  // MoE models: where this row's experts go ([MoE layers, k])
  };

  void load_linear(EngineLinear& dst, const LinearWeightSource& src, int64_t N, int64_t K);
  // One output of linears_forward: y [R, lin->N].
  struct LinearCall {
    const EngineLinear* lin;
    float* y;
  };
  // y = x [R, K] W^T for each linear of `calls` (all reading the same BF16-valued x), each in its
  // precision, rounded to BF16 if asked. Linears of one precision share the conversion of x
  // (BF16 encoding or the 1x128 quantization); up to kGemvMaxRows rows go through one GEMV call
  // (one pass of the pool for all of them), more rows through one GEMM per linear.
  void linears_forward(std::initializer_list<LinearCall> calls, const float* x, int64_t R, bool round_bf16);
  // The products x W^T alone (linears_forward less the biases), rounded if asked.
  void linears_products(std::initializer_list<LinearCall> calls, const float* x, int64_t R, bool round_bf16);
  // Runs the rows through the model, writing their K/V into the cache; then, if `logits` is
  // given, the logits [logit_rows.size(), V] of the rows listed in `logit_rows` (all R rows when
  // it is empty): a prefill needs only its prompts' last rows.
  void forward_rows(const std::vector<Row>& rows, float* logits, const std::vector<int64_t>& logit_rows = {});
  // y [R, C] = an MoE layer's MLP of h [R, C] (BF16-valued), rounded to BF16, as the trainer's
  // MoeMlp::forward computes it.
  // Each row's experts go to its Row::routing where set.
  void moe_forward(const EngineLayer& e, const std::vector<Row>& rows, const float* h, float* y);

  ModelConfig config_;
  PrecisionPolicy policy_;
  EngineOptions options_;
  bool weights_loaded_ = false;
  const bf16_t* embed_ = nullptr;  // [V, C] the source's BF16 embedding, or own_embed_
  AlignedBuffer<bf16_t> own_embed_;
  std::vector<EngineLayer> layers_;
  int64_t num_moe_layers_ = 0;
  AlignedBuffer<float> final_norm_;
  EngineLinear lm_head_;
  RopeTable rope_;
  KvCache kv_;
  GenerationStats stats_;
  // forward_rows' activations, kept between calls: every decode step would otherwise allocate
  // and zero them again. Each is fully written before it is read.
  struct Scratch {
    std::vector<float> x, h, tmp, q, k, v, att, qn, kn, rstd, g, u, s;
    std::vector<int32_t> positions;
    std::vector<float> moe_logits, moe_x, moe_g, moe_u, moe_s, moe_out;  // MoE layers
    MoeRouting routing;
    ExpertGroups groups;
  } scratch_;
};

}  // namespace fp8rl
