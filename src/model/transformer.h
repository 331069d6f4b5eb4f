// The trainer's policy model: a Llama-3 / Qwen3 decoder with forward and backward written out
// layer by layer (no autograd graph), FP32 master weights, and the per-linear precision policy.
//
// Dimension letters: B sequences, T positions (right-padded), N = B*T token rows, C d_model,
// Hq/Hkv heads, D head_dim, F d_ff, V vocab, L layers.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "core/aligned_buffer.h"
#include "io/spill_file.h"
#include "kernels/attention/attention.h"
#include "kernels/elementwise/rope.h"
#include "arch/config.h"
#include "model/linear.h"
#include "model/lm_head.h"
#include "model/moe.h"
#include "model/moe_load_balance.h"
#include "model/params.h"
#include "arch/precision.h"

namespace fp8rl {

// A batch of B right-padded sequences of T positions. Row b*T + t of every array is token t of
// sequence b.
struct TokenBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;     // [B*T] input token ids (padding: any valid id, e.g. pad)
  std::vector<int32_t> targets;    // [B*T] the token whose log-prob is wanted at this row; -1 = none
  std::vector<int32_t> positions;  // [B*T] RoPE position (t for right-padded sequences)
  std::vector<int32_t> lengths;    // [B] real tokens of each sequence (the rest is padding)
  // MoE router replay (policy.router_replay): [B*T, MoE layers, k] the experts row b*T + t takes
  // in each MoE layer, in slot order (the generator's record); a row whose first slot is -1 takes
  // the router's own choice. Empty: every token takes the router's choice.
  std::vector<int32_t> experts;

  // A batch of B x T pad tokens with targets -1, positions 0..T-1 and lengths T.
  static TokenBatch empty(int64_t B, int64_t T, int32_t pad_token);
};

// The embedding rows' term of one backward (Transformer::backward): for each distinct token of
// the batch, in order of first appearance, the sum of its rows' gradients in position order.
struct EmbeddingRowGrads {
  std::vector<int32_t> tokens;
  std::vector<float> rows;  // [tokens.size(), d_model]
};

// Memory (docs/model.md, "Memory"): a trainable model holds the FP32 masters and gradients
// [num_params] and each linear's low-precision copy; a forward for backward keeps per layer the
// activations of LayerActs over the batch's N rows (or, with activation checkpointing, only each
// layer's input, the rest recomputed layer by layer in backward); attention keeps no [T, T]
// probabilities and the LM head no [N, V] logits. A frozen model (frozen_copy, the reference
// policy; load_frozen_model) holds only what its forward reads: each linear's BF16 or FP8 copy,
// the norms, and the embedding as BF16 (shared with a tied BF16 LM head's copy).
class Transformer {
 public:
  Transformer(const ModelConfig& config, const PrecisionPolicy& policy);

  // An empty frozen model of this architecture and policy: zero weights for a streaming loader to
  // fill (frozen_linear, frozen_norm, set_frozen_embedding), then ready for forwards.
  static Transformer frozen(const ModelConfig& config, const PrecisionPolicy& policy);
  // A frozen copy of this model's current weights: its forwards give this model's log-probs bit
  // for bit (the reference policy of GRPO's KL term).
  Transformer frozen_copy() const;
  bool is_frozen() const { return frozen_; }

  const ModelConfig& config() const { return config_; }
  const PrecisionPolicy& policy() const { return policy_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t num_params() const { return layout_.numel(); }
  // [num_params] FP32 masters. A frozen model has none (these throw).
  float* params();
  const float* params() const;
  // [num_params] FP32, accumulated by backward(); allocated by the constructor and by zero_grads()
  // after release_grads(). zero_grads() only marks the buffer as zeros: the first backward() after
  // it writes its largest terms instead of adding them (the same bits) and clears the rest, and
  // grads() clears the buffer if no backward() has run since.
  float* grads();
  // Frees the gradient buffer until the next zero_grads() (between GRPO steps, where generation
  // does not need it).
  void release_grads();
  const WeightPointers& weights() const { return w_; }
  // Pointers into grads() (call it first: the values are valid after grads() or backward()).
  const WeightPointers& weight_grads() const { return g_; }

  // Per-layer activation recomputation (policy.activation_checkpointing): a forward for backward
  // keeps only each layer's input [N, C] and attention output [N, Hq*D] (both as BF16 under BF16
  // activations, where their values are BF16, so exactly); backward() runs the
  // layer's forward again (the same bits: the same inputs through the same kernels; the attention
  // output taken as saved, so attention runs once in the forward and once, probabilities only,
  // in its backward) just before its backward. Results are bit-identical either way.
  void set_activation_checkpointing(bool on) { checkpointing_ = on; }
  bool activation_checkpointing() const { return checkpointing_; }
  // policy.freeze_router (MoE): backward() gives the routers' weights no gradient (the gradient
  // still flows through the routing weights to each layer's input), and trains() says so, for the
  // optimizer (AdamW::freeze) to leave them as they are.
  void set_router_frozen(bool on) { router_frozen_ = on; }
  bool router_frozen() const { return router_frozen_; }
  // Whether training changes tensor `t` of layout().
  bool trains(const ParamInfo& t) const;

  // Llama-style initialisation from a seed: N(0, 0.02) matrices (output projections scaled by
  // 1/sqrt(2L)), unit norms. Deterministic; calls refresh_weights().
  void init_random(uint64_t seed);
  // Remakes every linear's BF16 / FP8 copy from the masters. Call after changing params().
  void refresh_weights();
  void zero_grads();

  // logprobs [B*T]: log-prob of targets[n] at row n (0 where targets[n] < 0). Saves activations;
  // `for_backward` false (and any forward of a frozen model) keeps nothing for backward: one
  // layer's activations, no FP8 column-wise copies, the same log-probs; a backward() after it is
  // refused.
  void forward(const TokenBatch& batch, float* logprobs, bool for_backward = true);
  // MoE: the load-balancing loss of the last forward over its real tokens (moe_load_balance.h);
  // 0 for a dense model.
  double moe_aux_loss() const { return load_balance_.loss(); }
  // Logits [rows.size(), V] (FP32) of the given rows of the last forward.
  void logits(const std::vector<int64_t>& rows, float* out);
  // Adds the gradient of sum_n dlogprobs[n] * logprobs[n] to grads(). Uses the last forward.
  //
  // The gradient contract (what makes micro-batches a fold that a data-parallel reduction can
  // reproduce, rl/data_parallel.h): every gradient element receives one term per call, formed from zero and
  // added once (a linear's weight product, a norm weight's column sum), except the embedding rows
  // of the batch's tokens, which then receive a second term: per distinct token, its rows'
  // gradients summed in position order from zero. (With tied embeddings the LM head's product is
  // the first term of those rows.) With `embedding_rows`, that second term is returned there
  // instead of added.
  // With `aux_loss_weight` (MoE, policy.aux_loss_coef times the micro-batch's share) the gradient
  // of aux_loss_weight * moe_aux_loss() is added too.
  void backward(const float* dlogprobs, EmbeddingRowGrads* embedding_rows = nullptr, double aux_loss_weight = 0.0);
  // Adds an embedding-row term (as backward() returns it) to grads().
  void add_embedding_rows(const EmbeddingRowGrads& rows);
  // A frozen model's weights out of memory and back (GRPO's reference policy between its log-prob
  // phases, policy.release_memory_between_phases). offload_weights writes the bytes of its large
  // weight buffers (each linear's copy, the embedding) to `file`, on the first call only (frozen
  // weights never change, so later calls must pass the same file), then gives their pages back to
  // the kernel; forwards are refused until restore_weights(file) reads them back, the same bits.
  // Buffers under kMappedBufferBytes (norms, scales) stay.
  void offload_weights(SpillFile& file);
  void restore_weights(const SpillFile& file);
  bool weights_offloaded() const { return offloaded_; }
  // Frees every buffer a forward or backward sized for its batch (saved activations, gradient
  // scratch, the prefix forwards' scratch): GRPO calls it after each phase, so that the memory of
  // the trainer's phases is never resident at once. The next forward allocates them again; a
  // backward() before it is refused.
  void release_activations();

  // Every linear with its spec (arch/spec.h: layer_linears of each layer, then lm_head_linear),
  // for the loader, the exporters and tests of the precision policy.
  struct NamedLinear : TensorSpec {
    const Linear* linear = nullptr;
  };
  std::vector<NamedLinear> linears() const;
  // The linear of a projection role in `layer` (and `expert`), or the LM head (kLmHead, or
  // kEmbedding when tied); throws when the model has no such linear.
  const Linear& linear(TensorRole role, int64_t layer = -1, int64_t expert = -1) const;
  // Linear::install_fp8_weights on the linear whose weight is `name` (an FP8 layer); throws for
  // any other name.
  void install_fp8_weights(std::string_view name, const QuantizedMatrix& w);
  // A frozen model's pieces, for streamed loading: the linear whose weight is `name` (a layer
  // linear or the LM head, also under the embedding's name when tied), the FP32 storage
  // of the 1-D tensor `name` (a norm), and rows [row0, row0 + rows) of the embedding [V, C]
  // (stored as BF16 under BF16 activations; with tied embeddings and a BF16 head the head's copy
  // is the embedding, and these are no-ops: set the head's rows).
  Linear& frozen_linear(std::string_view name);
  float* frozen_norm(std::string_view name);
  void set_frozen_embedding_rows(const float* rows, int64_t row0, int64_t n);
  void set_frozen_embedding_rows_bf16(const bf16_t* rows, int64_t row0, int64_t n);
  // The embedding row of each token as the forward reads it (BF16-rounded under BF16
  // activations): the generator's refit source, [V, C] BF16 when embedding_bf16() is set (a
  // frozen model's; a trainable one keeps no BF16 embedding, and the generator makes its own).
  const bf16_t* embedding_bf16() const;
  // Absolute maxima of q, k (after q/k-norm and RoPE) and v per layer, and per head of each, in
  // the last forward, over real (non-padding) rows: the KV-cache calibration of docs/recipe.md
  // section 6 (per-head maxima for generation.kv_scale_granularity: head).
  struct QkvAmax {
    float q = 0, k = 0, v = 0;                    // over all heads
    std::vector<float> q_heads, k_heads, v_heads;  // per head: [Hq], [Hkv], [Hkv]
    bool operator==(const QkvAmax&) const = default;
  };
  const std::vector<QkvAmax>& last_qkv_amax() const { return qkv_amax_; }
  // An MoE model's experts of every row of the last forward() as its router chose them (with
  // replay, the experts it would have taken): per MoE layer (in layer order), [N * k], row n's
  // slots at n * k .. n * k + k - 1, best first. Empty for a dense model.
  const std::vector<std::vector<int32_t>>& last_routing() const { return routing_; }
  // The calibration forward: what last_qkv_amax() would hold after forward(batch), bit for bit,
  // at a fraction of the cost. A token's q/k/v depend only on its sequence up to it (every kernel
  // but attention works row by row, the GEMMs are batch invariant, attention is causal), so each
  // distinct prefix of real tokens (same tokens, same positions) is computed once, duplicates and
  // shared prompts included, with no padding; the last layer stops after its q/k/v (no o, MLP,
  // final norm, LM head or log-probs) and nothing is kept for backward (no FP8 column-wise copies,
  // no attention probabilities). Leaves the last forward's activations, last_qkv_amax() and
  // backward() as they were.
  std::vector<QkvAmax> qkv_amax(const TokenBatch& batch);
  // Attention over the generator's FP8 KV values (policy.fp8_kv_attention): with scales set, every
  // forward rounds each layer's q (when `q` is given), k and v, after the amax is recorded, to
  // e4m3(x / scale) * scale with the scale of the row's KV head (q: of its KV head's group), the
  // values the generator's FP8 KV cache and FP8 attention compute with; the backward passes the
  // gradient straight through the rounding. Per layer, [Hkv] scales each; empty: off.
  struct AttentionE4m3Scales {
    std::vector<float> q, k, v;
  };
  void set_attention_e4m3_scales(std::vector<AttentionE4m3Scales> scales);
  // The log-probs of forward(batch, logprobs, false), bit for bit, through the prefix layout of
  // qkv_amax(): each distinct prefix is computed once (the G samples of a prompt share its rows)
  // and padding costs nothing. For forwards that only want log-probs (the reference policy's);
  // leaves the last forward's activations, last_qkv_amax() and backward() as they were.
  void prefix_logprobs(const TokenBatch& batch, float* logprobs);

 private:
  struct FrozenTag {};
  Transformer(const ModelConfig& config, const PrecisionPolicy& policy, FrozenTag);
  struct LayerLinears {
    Linear q, k, v, o, gate, up, down;  // gate, up, down: a dense MLP's (empty in an MoE layer)
    MoeMlp moe;                         // an MoE layer's MLP
    bool is_moe = false;
    int64_t moe_index = -1;  // an MoE layer's place among the MoE layers
    // Every linear of the layer in order (q, k, v, o, then gate, up, down or the MoE block's).
    std::vector<Linear*> all();
    std::vector<const Linear*> all() const;
    // The attention's or the dense MLP's linear of `role` (q, k, v, o, gate, up, down), else
    // nullptr (an MoE layer's gate, up and down are its experts').
    Linear* dense(TensorRole role);
    const Linear* dense(TensorRole role) const;
  };
  // Saved activations of one layer, each [N, ...] row-major.
  struct LayerActs {
    AlignedBuffer<float> x;       // [N, C] residual input
    // With checkpointing under BF16 activations, the layer's input kept as BF16 instead of x (its
    // values are BF16: the embedding and every residual add round to BF16, so nothing is lost).
    AlignedBuffer<bf16_t> x_bf16;
    AlignedBuffer<float> h1;      // [N, C] attention-norm output
    AlignedBuffer<float> rstd1;   // [N]
    AlignedBuffer<float> q_raw;   // [N, Hq*D] before q-norm (q-norm models)
    AlignedBuffer<float> k_raw;   // [N, Hkv*D]
    AlignedBuffer<float> q_rstd;  // [N*Hq]
    AlignedBuffer<float> k_rstd;  // [N*Hkv]
    AlignedBuffer<float> q;       // [N, Hq*D] after norm and RoPE (before any E4M3 rounding)
    AlignedBuffer<float> k;       // [N, Hkv*D]
    AlignedBuffer<float> v;       // [N, Hkv*D]
    AlignedBuffer<float> att;     // [N, Hq*D] attention output
    // With checkpointing, what each layer keeps besides x: its attention output, so that the
    // recomputation in backward skips the attention (BF16 under BF16 activations, where att is
    // BF16-valued; FP32 otherwise). [N, Hq*D]
    AlignedBuffer<bf16_t> att_saved_bf16;
    AlignedBuffer<float> att_saved_f32;
    AlignedBuffer<float> x_mid;   // [N, C] residual after attention
    AlignedBuffer<float> h2;      // [N, C] MLP-norm output
    AlignedBuffer<float> rstd2;   // [N]
    AlignedBuffer<float> g;       // [N, F]
    AlignedBuffer<float> u;       // [N, F]
    AlignedBuffer<float> s;       // [N, F] SwiGLU output
    LinearCache cq, ck, cv, co, cgate, cup, cdown;
    MoeActs moe;  // an MoE layer's MLP (instead of g, u, s and its caches)
    AttentionKvWords kv_words;  // prefix layouts under bf16 attention: scratch of the attention
  };

  // The rows one layer block runs over. forward(): the B x T right-padded batch (row b*T + t),
  // attention by attention_forward over `shape`. qkv_amax(): one row per distinct prefix, no
  // padding; row n attends to rows context[context_begin[n] .. context_begin[n + 1]), its prefix
  // in position order, itself last.
  struct RowLayout {
    int64_t N = 0;
    std::vector<int32_t> tokens;     // [N]
    std::vector<int32_t> positions;  // [N] RoPE position
    std::vector<uint8_t> is_real;    // [N] 1 where the row holds a real token (not padding)
    std::vector<int32_t> real_rows;  // the rows with is_real
    AttentionShape shape{};          // the batch layout's
    std::vector<int64_t> context_begin;  // [N + 1], prefix layout only
    std::vector<int32_t> context;        // [context_begin[N]]
    // Router replay: per MoE layer [N * k], TokenBatch::experts of each row; empty: none.
    std::vector<std::vector<int32_t>> replay;
  };
  // Checks `batch` (every error forward() reports) and returns its batch layout.
  RowLayout batch_layout(const TokenBatch& batch, const char* caller) const;
  // The prefix layout of `padded` (one row per distinct prefix, see qkv_amax); row_of[b * T + t]
  // receives the prefix row of each real position (-1 for padding) when given. Sizes the
  // calibration buffers for it.
  RowLayout prefix_layout(const TokenBatch& batch, const RowLayout& padded, std::vector<int32_t>* row_of);
  // x [N, C] = the BF16-rounded embeddings of the real rows, zero for padding.
  void embed(float* x, const RowLayout& rows) const;
  // The LM head's input: the final norm of N rows of hidden states x into hf (rstd [N]), rounded
  // to BF16 unless fp32_lm_head.
  void final_norm(float* hf, float* rstd, const float* x, int64_t N) const;
  // One decoder layer over `rows`: input x [N, C], output x_next [N, C] (may be x), the
  // activations into `a`; returns the layer's q/k/v amax over the real rows. `save_for_backward`
  // keeps the FP8 linears' column-wise copies; `stop_after_qkv` returns right after the amax
  // (x_next untouched). `tmp` [N, C] is scratch. With `saved`, the attention output is taken from
  // its att_saved_* (the layer's first forward, checkpointing) instead of being computed again.
  QkvAmax layer_forward(int64_t l, const float* x, LayerActs& a, float* x_next, float* tmp, const RowLayout& rows,
                        bool save_for_backward, bool stop_after_qkv, const LayerActs* saved = nullptr) const;
  // With attention_e4m3_: layer l's q (when scaled), k and v rounded to E4M3 with its scales, into
  // e4m3_qkv_: the code values the attention reads and the scaled values the gradient flows
  // through, from a.q, a.k, a.v (left as they are).
  struct E4m3Qkv {
    const float *q_codes, *k_codes, *v_codes;  // [N, Hq*D], [N, Hkv*D] x 2
    const float *q, *k, *v;                    // the scaled values
    std::vector<float> score_scales, value_scales;  // [Hkv] each
  };
  E4m3Qkv round_qkv_to_e4m3(int64_t l, const LayerActs& a, int64_t N) const;
  // dx [N, C] (the gradient of the layer's output) becomes the gradient of its input x; the
  // layer's weight gradients are added. `w` holds the other gradient buffers.
  struct BackwardScratch;
  // `write_grads`: the dense linears' weight products are written, not added (backward()).
  void layer_backward(int64_t l, const float* x, const LayerActs& a, float* dx, BackwardScratch& w, bool write_grads);
  // After zero_grads(): clears the gradient tensors backward() adds to rather than writes (see
  // backward()) and returns true; false (nothing done) when the buffer holds real gradients.
  bool clear_grads_for_writing();
  void ensure_layer_acts(LayerActs& a, int64_t N) const;
  void resize_activations(int64_t B, int64_t T);
  void round_activations(float* x, int64_t n) const;
  // The linears (trainable, or frozen for a frozen model) and the RoPE table of the config.
  void build_linears();
  void bind_frozen_storage();
  // Points q, k and v at their biases in w_ (none without qkv_bias).
  void bind_biases();
  // Calls f(buffer, bytes, offset) for each weight buffer of a frozen model that is a memory map
  // (each linear's copies, the embedding), in a fixed order, offset counting the bytes before it.
  template <typename F>
  void visit_offloadable_weights(F&& f);

  ModelConfig config_;
  PrecisionPolicy policy_;
  ParamLayout layout_;
  bool frozen_ = false;
  bool checkpointing_ = false;
  bool router_frozen_ = false;
  bool offloaded_ = false;                 // offload_weights() without restore_weights() since
  const SpillFile* spilled_to_ = nullptr;  // the file offload_weights wrote them to, once
  // Trainable: the FP32 masters [num_params]. Frozen: only the 1-D tensors (norms), packed.
  AlignedBuffer<float> params_, grads_;
  WeightPointers w_, g_;
  bool grads_zero_ = false;  // grads_ stands for zeros (zero_grads()) whatever its memory holds
  std::vector<LayerLinears> linears_;
  Linear lm_head_;
  // Frozen only: the embedding [V, C] as the forward reads it (BF16, or FP32 under FP32
  // activations); empty when a tied BF16 head's copy serves.
  AlignedBuffer<bf16_t> embed_bf16_;
  AlignedBuffer<float> embed_f32_;
  RopeTable rope_;

  // Activations of the last forward.
  int64_t B_ = 0, T_ = 0;
  bool saved_for_backward_ = false;
  TokenBatch batch_;  // copy of the last forward's batch
  RowLayout rows_;    // and its layout
  std::vector<LayerActs> acts_;  // per layer (with checkpointing only their input and attention output)
  LayerActs recompute_acts_;     // checkpointing: the layer being differentiated
  AlignedBuffer<float> x_final_, hf_, rstd_f_, lse_;  // [N, C], [N, C], [N], [N]
  LmHeadScratch head_scratch_;
  struct BackwardScratch {  // backward's gradient buffers, reused across calls
    AlignedBuffer<float> dhf, dx, dx_mid, dh, ds, dg, du, datt, dq, dk, dv, dq_raw, dk_raw, tmp;
    MoeGradScratch moe;  // MoE layers'
    std::vector<float> aux_dprobs;  // [N, E] the load-balancing loss's gradient of the router probabilities, or empty
  };
  BackwardScratch backward_scratch_;
  std::vector<QkvAmax> qkv_amax_;
  std::vector<std::vector<int32_t>> routing_;  // last_routing()
  LoadBalanceStats load_balance_;              // moe_aux_loss()
  std::vector<AttentionE4m3Scales> attention_e4m3_;  // [n_layers] or empty
  // With attention_e4m3_: one layer's q, k, v as E4M3 code values (unscaled) for the attention,
  // which applies the scales per KV head as the generator does, and as the scaled values.
  mutable AlignedBuffer<float> e4m3_qkv_;
  // Scratch of qkv_amax(): one layer's activations (reused by every layer) and the projections.
  LayerActs calib_acts_;
  AlignedBuffer<float> calib_tmp_;  // [N, C]
};

}  // namespace fp8rl
