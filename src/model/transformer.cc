#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <optional>
#include <tuple>
#include <unordered_map>
#include <utility>

#include "core/check.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "kernels/attention/attention_row.h"
#include "kernels/attention/attention_scales.h"
#include "kernels/elementwise/logprob.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/swiglu.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"

namespace fp8rl {

namespace {
// Grows `buf` to hold n elements; never shrinks, so batches of varying length reuse one allocation
// (every user writes the elements it reads).
template <typename T>
void ensure(AlignedBuffer<T>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf = AlignedBuffer<T>(static_cast<size_t>(n));
}
// out = a + b, rounded to BF16 values when `round`: one pass, in tasks on the kernel pool
// (elementwise: the same bits as the add followed by bf16_round_f32).
void add_into(float* out, const float* a, const float* b, int64_t n, bool round) {
  parallel_for_ranges(n, 16384, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) out[i] = a[i] + b[i];
    if (round) bf16_round_f32(out + i0, i1 - i0);
  });
}
// Largest |x| per head over the rows of a [*, heads * D] buffer that have a real token, into
// heads_amax [heads]; returns their maximum. (16 running maxima per head the compiler can
// vectorise; max is exact, so the order does not matter.)
float amax_rows(const float* x, int64_t heads, int64_t D, const std::vector<int32_t>& real_rows,
                std::vector<float>& heads_amax) {
  std::vector<float> lanes(static_cast<size_t>(heads * 16), 0.0f);
  for (int32_t r : real_rows) {
    for (int64_t h = 0; h < heads; ++h) {
      const float* row = x + (r * heads + h) * D;
      float* hl = lanes.data() + h * 16;
      int64_t i = 0;
      for (; i + 16 <= D; i += 16)
        for (int l = 0; l < 16; ++l) {
          const float a = std::fabs(row[i + l]);
          hl[l] = a > hl[l] ? a : hl[l];
        }
      for (; i < D; ++i) hl[0] = std::max(hl[0], std::fabs(row[i]));
    }
  }
  heads_amax.assign(static_cast<size_t>(heads), 0.0f);
  float m = 0.0f;
  for (int64_t h = 0; h < heads; ++h) {
    for (int l = 0; l < 16; ++l) heads_amax[static_cast<size_t>(h)] = std::max(heads_amax[static_cast<size_t>(h)], lanes[static_cast<size_t>(h * 16 + l)]);
    m = std::max(m, heads_amax[static_cast<size_t>(h)]);
  }
  return m;
}

// scaled [N, heads * D] = e4m3(x / s) * s, s = scale[h / heads_per_scale] for head h, and
// codes [N, heads * D] = e4m3(x / s), the code values before the scale. (The vector codecs of
// numerics/codec.h give the scalar codec's bits.)
void round_heads_to_e4m3(const float* x, float* scaled, float* codes_out, int64_t N, int64_t heads, int64_t D,
                         int64_t heads_per_scale, const std::vector<float>& scale) {
  const int64_t W = heads * D;
  parallel_for_ranges(N, 64, [&](int64_t r0, int64_t r1) {
    std::vector<uint8_t> codes(static_cast<size_t>(W));
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = x + r * W;
      float* out = scaled + r * W;
      float* y = codes_out + r * W;
      for (int64_t h = 0; h < heads; ++h) {
        const float sc = scale[static_cast<size_t>(h / heads_per_scale)];
        for (int64_t d = h * D; d < (h + 1) * D; ++d) y[d] = row[d] / sc;
      }
      e4m3_encode_f32(y, codes.data(), W);
      e4m3_decode_f32(codes.data(), y, W);
      for (int64_t h = 0; h < heads; ++h) {
        const float sc = scale[static_cast<size_t>(h / heads_per_scale)];
        for (int64_t d = h * D; d < (h + 1) * D; ++d) out[d] = y[d] * sc;
      }
    }
  });
}

}  // namespace

TokenBatch TokenBatch::empty(int64_t B, int64_t T, int32_t pad_token) {
  TokenBatch b;
  b.B = B;
  b.T = T;
  b.tokens.assign(static_cast<size_t>(B * T), pad_token);
  b.targets.assign(static_cast<size_t>(B * T), -1);
  b.positions.resize(static_cast<size_t>(B * T));
  for (int64_t i = 0; i < B * T; ++i) b.positions[static_cast<size_t>(i)] = static_cast<int32_t>(i % T);
  b.lengths.assign(static_cast<size_t>(B), static_cast<int32_t>(T));
  return b;
}

Transformer::Transformer(const ModelConfig& config, const PrecisionPolicy& policy)
    : config_(config), policy_(policy), layout_(config) {
  policy_.validate();
  params_ = AlignedBuffer<float>(static_cast<size_t>(layout_.numel()));
  grads_ = AlignedBuffer<float>(static_cast<size_t>(layout_.numel()));
  w_ = layout_.bind(params_.data());
  g_ = layout_.bind(grads_.data());
  build_linears();
  bind_biases();
  refresh_weights();
}

Transformer Transformer::frozen(const ModelConfig& config, const PrecisionPolicy& policy) {
  return Transformer(config, policy, FrozenTag{});
}

Transformer::Transformer(const ModelConfig& config, const PrecisionPolicy& policy, FrozenTag)
    : config_(config), policy_(policy), layout_(config), frozen_(true) {
  policy_.validate();
  build_linears();
  bind_frozen_storage();
  bind_biases();
}

void Transformer::build_linears() {
  const bool round = policy_.activations == Precision::kBF16;
  // A trainable linear (its copies made from the masters by refresh_weights) or a frozen one.
  auto linear = [&](const TensorSpec& t, bool round_output) {
    const Precision p = linear_precision(policy_, config_.n_layers, t);
    return frozen_ ? Linear::frozen(t.name, t.shape[0], t.shape[1], p, policy_.weight_scale_format,
                                    policy_.activation_scale_format, round_output)
                   : Linear(t.name, t.shape[0], t.shape[1], p, policy_.weight_scale_format,
                            policy_.activation_scale_format, round_output);
  };
  int64_t moe_layers = 0;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    LayerLinears ll;
    ll.is_moe = config_.is_moe_layer(l);
    for (const TensorSpec& t : layer_linears(config_, l)) {
      if (Linear* dense = ll.dense(t.role)) *dense = linear(t, round);
    }
    if (ll.is_moe) {
      ll.moe_index = moe_layers++;
      const MoeShape shape{config_.d_model, config_.d_expert, config_.num_experts, config_.experts_per_token,
                           config_.norm_topk_prob};
      ll.moe = MoeMlp(l, config_.n_layers, shape, policy_, frozen_);
    }
    linears_.push_back(std::move(ll));
  }
  lm_head_ = linear(lm_head_linear(config_), /*round_output=*/false);
  // The trainer's head reads its BF16 weights slice by slice (model/lm_head.h): made from the
  // master as it goes, no [V, C] copy.
  if (!frozen_ && lm_head_.precision() == Precision::kBF16) lm_head_.drop_bf16_copy();
  rope_ = rope_table(config_.head_dim, config_.max_seq_len, config_.rope_theta,
                     config_.rope_llama3_scaling ? &config_.rope_scaling : nullptr);
}

void Transformer::bind_biases() {
  for (size_t l = 0; l < linears_.size(); ++l) {
    const LayerWeights& lw = w_.layers[l];
    LayerLinears& ll = linears_[l];
    ll.q.set_bias(lw.bq), ll.k.set_bias(lw.bk), ll.v.set_bias(lw.bv);
  }
}

void Transformer::bind_frozen_storage() {
  params_ = AlignedBuffer<float>(static_cast<size_t>(layout_.norms_numel()));
  w_ = layout_.bind_norms(params_.data());
  g_ = WeightPointers{};
  const int64_t VC = config_.vocab_size * config_.d_model;
  const bool head_is_embedding = config_.tie_embeddings && lm_head_.precision() == Precision::kBF16;
  if (policy_.activations == Precision::kF32) {
    embed_f32_ = AlignedBuffer<float>(static_cast<size_t>(VC));
  } else if (!head_is_embedding) {
    embed_bf16_ = AlignedBuffer<bf16_t>(static_cast<size_t>(VC));
  }
}

template <typename F>
void Transformer::visit_offloadable_weights(F&& f) {
  int64_t offset = 0;
  const auto visit = [&](auto& buffer) {
    if (!buffer.mapped()) return;
    const size_t bytes = buffer.size() * sizeof(*buffer.data());
    f(buffer, bytes, offset);
    offset += static_cast<int64_t>(bytes);
  };
  for (LayerLinears& ll : linears_)
    for (Linear* linear : ll.all()) linear->visit_weight_storage(visit);
  lm_head_.visit_weight_storage(visit);
  visit(embed_bf16_), visit(embed_f32_);
}

void Transformer::offload_weights(SpillFile& file) {
  FP8RL_CHECK(frozen_, "offload_weights: only a frozen model's weights leave memory");
  FP8RL_CHECK(spilled_to_ == nullptr || spilled_to_ == &file, "offload_weights: the weights are in another file");
  if (offloaded_) return;
  if (spilled_to_ == nullptr) {  // every byte written before any page goes: a failed write loses nothing
    visit_offloadable_weights([&](auto& buffer, size_t bytes, int64_t at) { file.write(at, buffer.data(), bytes); });
    spilled_to_ = &file;
  }
  visit_offloadable_weights([](auto& buffer, size_t, int64_t) { buffer.discard_pages(); });
  offloaded_ = true;
}

void Transformer::restore_weights(const SpillFile& file) {
  FP8RL_CHECK(offloaded_ && spilled_to_ == &file, "restore_weights: the weights were not offloaded to this file");
  visit_offloadable_weights([&](auto& buffer, size_t bytes, int64_t at) { file.read(at, buffer.data(), bytes); });
  offloaded_ = false;
}

Transformer Transformer::frozen_copy() const {
  FP8RL_CHECK(!frozen_, "frozen_copy of a frozen model (share it instead)");
  Transformer f(config_, policy_, FrozenTag{});
  for (size_t l = 0; l < linears_.size(); ++l) {
    const LayerLinears& src = linears_[l];
    LayerLinears& dst = f.linears_[l];
    dst.q = src.q.frozen_copy(), dst.k = src.k.frozen_copy(), dst.v = src.v.frozen_copy();
    dst.o = src.o.frozen_copy();
    if (src.is_moe) {
      dst.moe = src.moe.frozen_copy();
    } else {
      dst.gate = src.gate.frozen_copy(), dst.up = src.up.frozen_copy(), dst.down = src.down.frozen_copy();
    }
  }
  f.lm_head_ = lm_head_.frozen_copy();
  for (const ParamInfo& p : layout_.tensors())
    if (p.shape.rank == 1) std::copy(params_.data() + p.offset, params_.data() + p.offset + p.shape.numel(), f.frozen_norm(p.name));
  f.set_frozen_embedding_rows(w_.embed, 0, config_.vocab_size);
  f.bind_biases();  // the copies' own (Linear::frozen_copy keeps no pointer into this model)
  f.attention_e4m3_ = {};
  return f;
}

float* Transformer::params() {
  FP8RL_CHECK(!frozen_, "a frozen model has no FP32 masters");
  return params_.data();
}
const float* Transformer::params() const {
  FP8RL_CHECK(!frozen_, "a frozen model has no FP32 masters");
  return params_.data();
}

namespace {

// n floats from p set to +0, in chunks on the kernel pool (2.4 GB of gradients at Qwen3-0.6B).
void clear_floats(float* p, int64_t n) {
  parallel_for_ranges(n, int64_t{1} << 18, [&](int64_t i0, int64_t i1) {
    std::memset(p + i0, 0, static_cast<size_t>(i1 - i0) * sizeof(float));
  });
}

}  // namespace

float* Transformer::grads() {
  FP8RL_CHECK(!frozen_, "a frozen model has no gradients");
  FP8RL_CHECK(!grads_.empty(), "gradients were released (release_grads): call zero_grads first");
  if (grads_zero_) {
    clear_floats(grads_.data(), static_cast<int64_t>(grads_.size()));
    grads_zero_ = false;
  }
  return grads_.data();
}

void Transformer::release_grads() {
  grads_ = AlignedBuffer<float>();
  g_ = WeightPointers{};
  grads_zero_ = false;
}

Linear& Transformer::frozen_linear(std::string_view name) {
  FP8RL_CHECK(frozen_, "frozen_linear on a trainable model");
  if (name == lm_head_.name()) return lm_head_;
  for (LayerLinears& ll : linears_)
    for (Linear* lin : ll.all())
      if (lin->name() == name) return *lin;
  FP8RL_CHECK(false, "'{}' is not a linear of this model", name);
  return lm_head_;
}

float* Transformer::frozen_norm(std::string_view name) {
  FP8RL_CHECK(frozen_, "frozen_norm on a trainable model");
  const ParamInfo& p = layout_.find(name);
  FP8RL_CHECK(p.shape.rank == 1, "'{}' is not a norm weight (shape {})", name, p.shape.str());
  int64_t offset = 0;
  for (const ParamInfo& q : layout_.tensors()) {
    if (&q == &p) return params_.data() + offset;
    if (q.shape.rank == 1) offset += q.shape.numel();
  }
  return nullptr;
}

void Transformer::set_frozen_embedding_rows(const float* rows, int64_t row0, int64_t n) {
  FP8RL_CHECK(frozen_, "set_frozen_embedding_rows on a trainable model");
  const int64_t C = config_.d_model;
  FP8RL_CHECK(row0 >= 0 && n >= 0 && row0 + n <= config_.vocab_size, "embedding rows [{}, {}) outside [0, {})", row0,
              row0 + n, config_.vocab_size);
  if (!embed_f32_.empty()) std::copy(rows, rows + n * C, embed_f32_.data() + row0 * C);
  if (!embed_bf16_.empty()) bf16_encode_f32(rows, embed_bf16_.data() + row0 * C, n * C);
}

void Transformer::set_frozen_embedding_rows_bf16(const bf16_t* rows, int64_t row0, int64_t n) {
  FP8RL_CHECK(frozen_, "set_frozen_embedding_rows_bf16 on a trainable model");
  const int64_t C = config_.d_model;
  FP8RL_CHECK(row0 >= 0 && n >= 0 && row0 + n <= config_.vocab_size, "embedding rows [{}, {}) outside [0, {})", row0,
              row0 + n, config_.vocab_size);
  if (!embed_bf16_.empty()) std::copy(rows, rows + n * C, embed_bf16_.data() + row0 * C);
  if (!embed_f32_.empty())
    for (int64_t i = 0; i < n * C; ++i) embed_f32_[static_cast<size_t>(row0 * C + i)] = bf16_to_f32(rows[i]);
}

const bf16_t* Transformer::embedding_bf16() const {
  if (policy_.activations != Precision::kBF16) return nullptr;
  if (!embed_bf16_.empty()) return embed_bf16_.data();
  if (config_.tie_embeddings && !lm_head_.bf16_weights().empty()) return lm_head_.bf16_weights().data();
  return nullptr;  // the trainer's (its head keeps no BF16 copy)
}

void Transformer::init_random(uint64_t seed) {
  FP8RL_CHECK(!frozen_, "init_random on a frozen model");
  const double out_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  uint64_t stream = 0;
  for (const ParamInfo& p : layout_.tensors()) {
    float* data = params_.data() + p.offset;
    const int64_t n = p.shape.numel();
    if (p.shape.rank == 1) {
      std::fill(data, data + n, is_bias(p.role) ? 0.0f : 1.0f);  // biases 0, norm weights 1
    } else {
      fill_normal(data, n, 0.0f, static_cast<float>(0.02 * (is_residual_output(p.role) ? out_scale : 1.0)), seed, stream);
    }
    ++stream;
  }
  refresh_weights();
}

void Transformer::refresh_weights() {
  FP8RL_CHECK(!frozen_, "refresh_weights on a frozen model (its weights are set once)");
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    LayerLinears& ll = linears_[static_cast<size_t>(l)];
    ll.q.refresh_weights(lw.wq);
    ll.k.refresh_weights(lw.wk);
    ll.v.refresh_weights(lw.wv);
    ll.o.refresh_weights(lw.wo);
    if (ll.is_moe) {
      ll.moe.refresh_weights(lw.moe);
    } else {
      ll.gate.refresh_weights(lw.w_gate);
      ll.up.refresh_weights(lw.w_up);
      ll.down.refresh_weights(lw.w_down);
    }
  }
  lm_head_.refresh_weights(w_.lm_head);
}

bool Transformer::trains(const ParamInfo& t) const {
  return !(router_frozen_ && t.role == TensorRole::kRouter);
}

void Transformer::zero_grads() {
  FP8RL_CHECK(!frozen_, "a frozen model has no gradients");
  if (grads_.empty()) {  // released: a new zeroed buffer
    grads_ = AlignedBuffer<float>(static_cast<size_t>(layout_.numel()));
    g_ = layout_.bind(grads_.data());
    grads_zero_ = false;
    return;
  }
  grads_zero_ = true;  // cleared by the next backward() or grads(), whichever comes first
}

bool Transformer::clear_grads_for_writing() {
  if (!grads_zero_) return false;
  grads_zero_ = false;
  // Written by backward(): every layer's attention projections, a dense MLP's three, the LM head
  // (with tied embeddings also the embedding, whose rows are added after it).
  std::vector<const float*> written = {g_.lm_head};
  for (size_t l = 0; l < linears_.size(); ++l) {
    const LayerWeights& lg = g_.layers[l];
    written.insert(written.end(), {lg.wq, lg.wk, lg.wv, lg.wo});
    if (!linears_[l].is_moe) written.insert(written.end(), {lg.w_gate, lg.w_up, lg.w_down});
  }
  for (const ParamInfo& t : layout_.tensors()) {
    float* p = grads_.data() + t.offset;
    if (std::find(written.begin(), written.end(), p) == written.end()) clear_floats(p, t.shape.numel());
  }
  return true;
}

std::vector<Transformer::NamedLinear> Transformer::linears() const {
  std::vector<NamedLinear> out;
  auto add = [&](TensorSpec t) {
    NamedLinear n;
    static_cast<TensorSpec&>(n) = std::move(t);
    n.linear = &linear(n.role, n.layer, n.expert);
    out.push_back(std::move(n));
  };
  for (int64_t l = 0; l < config_.n_layers; ++l)
    for (TensorSpec& t : layer_linears(config_, l)) add(std::move(t));
  add(lm_head_linear(config_));
  return out;
}

const Linear& Transformer::linear(TensorRole role, int64_t layer, int64_t expert) const {
  if (layer < 0 && (role == TensorRole::kLmHead || (role == TensorRole::kEmbedding && config_.tie_embeddings)))
    return lm_head_;
  FP8RL_CHECK(layer >= 0 && layer < config_.n_layers, "linear '{}': layer {} outside [0, {})", tensor_role_name(role),
              layer, config_.n_layers);
  const LayerLinears& ll = linears_[static_cast<size_t>(layer)];
  if (const Linear* dense = ll.dense(role)) return *dense;
  FP8RL_CHECK(ll.is_moe, "layer {} has no linear '{}'", layer, tensor_role_name(role));
  return ll.moe.linear(role, expert);  // the router or an expert's; throws for any other role
}

void Transformer::install_fp8_weights(std::string_view name, const QuantizedMatrix& w) {
  for (LayerLinears& ll : linears_)
    for (Linear* lin : ll.all())
      if (lin->name() == name) return lin->install_fp8_weights(w);
  FP8RL_CHECK(false, "install_fp8_weights: '{}' is not a layer linear of this model", name);
}

Linear* Transformer::LayerLinears::dense(TensorRole role) {
  return const_cast<Linear*>(std::as_const(*this).dense(role));
}

const Linear* Transformer::LayerLinears::dense(TensorRole role) const {
  const bool mlp = role == TensorRole::kGate || role == TensorRole::kUp || role == TensorRole::kDown;
  if (is_moe && mlp) return nullptr;  // an MoE layer's MLP is its experts'
  switch (role) {
    case TensorRole::kQ: return &q;
    case TensorRole::kK: return &k;
    case TensorRole::kV: return &v;
    case TensorRole::kO: return &o;
    case TensorRole::kGate: return &gate;
    case TensorRole::kUp: return &up;
    case TensorRole::kDown: return &down;
    default: return nullptr;
  }
}

std::vector<Linear*> Transformer::LayerLinears::all() {
  std::vector<Linear*> out{&q, &k, &v, &o};
  if (is_moe) {
    const std::vector<Linear*> m = moe.linears();
    out.insert(out.end(), m.begin(), m.end());
  } else {
    out.insert(out.end(), {&gate, &up, &down});
  }
  return out;
}

std::vector<const Linear*> Transformer::LayerLinears::all() const {
  const std::vector<Linear*> m = const_cast<LayerLinears*>(this)->all();
  return {m.begin(), m.end()};
}

void Transformer::release_activations() {
  acts_.clear();
  routing_ = {};
  recompute_acts_ = LayerActs{};
  x_final_ = {}, hf_ = {}, rstd_f_ = {}, lse_ = {};
  head_scratch_ = LmHeadScratch{};
  backward_scratch_ = BackwardScratch{};
  calib_acts_ = LayerActs{};
  calib_tmp_ = {};
  e4m3_qkv_ = {};
  batch_ = TokenBatch{};
  rows_ = RowLayout{};
  B_ = T_ = 0;
  saved_for_backward_ = false;
}

void Transformer::round_activations(float* x, int64_t n) const {
  if (policy_.activations == Precision::kBF16) bf16_round_f32(x, n);
}

void Transformer::ensure_layer_acts(LayerActs& a, int64_t N) const {
  const int64_t C = config_.d_model, F = config_.d_ff;
  const int64_t QD = config_.q_dim(), KD = config_.kv_dim(), Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  ensure(a.x, N * C), ensure(a.h1, N * C), ensure(a.rstd1, N);
  if (config_.qk_norm) ensure(a.q_raw, N * QD), ensure(a.k_raw, N * KD), ensure(a.q_rstd, N * Hq), ensure(a.k_rstd, N * Hkv);
  ensure(a.q, N * QD), ensure(a.k, N * KD), ensure(a.v, N * KD);
  ensure(a.att, N * QD), ensure(a.x_mid, N * C), ensure(a.h2, N * C), ensure(a.rstd2, N);
  ensure(a.g, N * F), ensure(a.u, N * F), ensure(a.s, N * F);
}

void Transformer::resize_activations(int64_t B, int64_t T) {
  const int64_t N = B * T, C = config_.d_model;
  acts_.resize(static_cast<size_t>(config_.n_layers));
  for (LayerActs& a : acts_) {
    if (checkpointing_) {
      // The layer's input and its attention output only; the rest is recomputed in backward.
      if (policy_.activations == Precision::kBF16) {
        ensure(a.x_bf16, N * C);
        ensure(a.att_saved_bf16, N * config_.q_dim());
      } else {
        ensure(a.x, N * C);
        ensure(a.att_saved_f32, N * config_.q_dim());
      }
    } else {
      ensure_layer_acts(a, N);
    }
  }
  if (checkpointing_) ensure_layer_acts(recompute_acts_, N);
  ensure(x_final_, N * C), ensure(hf_, N * C), ensure(rstd_f_, N), ensure(lse_, N);
  B_ = B;
  T_ = T;
}

Transformer::RowLayout Transformer::batch_layout(const TokenBatch& batch, const char* caller) const {
  const int64_t B = batch.B, T = batch.T, N = B * T;
  FP8RL_CHECK(!offloaded_, "{}: the model's weights are offloaded (offload_weights): restore_weights first", caller);
  FP8RL_CHECK(B > 0 && T > 0, "{}: empty batch B={} T={}", caller, B, T);
  FP8RL_CHECK(batch.tokens.size() == static_cast<size_t>(N) && batch.targets.size() == static_cast<size_t>(N) &&
                  batch.positions.size() == static_cast<size_t>(N),
              "{}: batch arrays must have B*T = {} entries (tokens {}, targets {}, positions {})", caller, N,
              batch.tokens.size(), batch.targets.size(), batch.positions.size());
  FP8RL_CHECK(T <= config_.max_seq_len, "{}: {} positions exceed max_seq_len {}", caller, T, config_.max_seq_len);
  FP8RL_CHECK(batch.lengths.size() == static_cast<size_t>(B), "{}: batch needs {} lengths, got {}", caller, B,
              batch.lengths.size());
  RowLayout rows;
  rows.N = N;
  rows.tokens = batch.tokens;
  rows.positions = batch.positions;
  rows.shape = {B, T, config_.n_heads, config_.n_kv_heads, config_.head_dim};
  rows.is_real.assign(static_cast<size_t>(N), 0);
  for (int64_t b = 0; b < B; ++b) {
    const int32_t len = batch.lengths[static_cast<size_t>(b)];
    FP8RL_CHECK(len >= 0 && len <= T, "{}: sequence {} has length {} outside [0, {}]", caller, b, len, T);
    for (int32_t t = 0; t < len; ++t) {
      rows.real_rows.push_back(static_cast<int32_t>(b * T + t));
      rows.is_real[static_cast<size_t>(b * T + t)] = 1;
    }
  }
  for (int64_t n = 0; n < N; ++n) {
    FP8RL_CHECK(rows.is_real[static_cast<size_t>(n)] || batch.targets[static_cast<size_t>(n)] < 0,
                "{}: row {} is padding (beyond its sequence's length) but has target {}", caller, n,
                batch.targets[static_cast<size_t>(n)]);
    const int32_t tok = batch.tokens[static_cast<size_t>(n)];
    FP8RL_CHECK(tok >= 0 && tok < config_.vocab_size, "{}: token id {} at row {} outside the vocabulary of {}", caller,
                tok, n, config_.vocab_size);
    const int32_t target = batch.targets[static_cast<size_t>(n)];
    FP8RL_CHECK(target < config_.vocab_size, "{}: target id {} at row {} outside the vocabulary of {}", caller, target,
                n, config_.vocab_size);
  }
  if (!batch.experts.empty()) {  // router replay: [N, MoE layers, k] to [MoE layers][N * k]
    const int64_t L_moe = config_.num_moe_layers();
    const int64_t k = config_.experts_per_token;
    FP8RL_CHECK(L_moe > 0, "{}: the batch names experts for router replay, but the model has no MoE layers", caller);
    FP8RL_CHECK(batch.experts.size() == static_cast<size_t>(N * L_moe * k),
                "{}: router replay needs B*T x MoE layers x k = {} x {} x {} experts, got {}", caller, N, L_moe, k,
                batch.experts.size());
    rows.replay.assign(static_cast<size_t>(L_moe), std::vector<int32_t>(static_cast<size_t>(N * k)));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t m = 0; m < L_moe; ++m)
        std::copy_n(batch.experts.begin() + (n * L_moe + m) * k, k,
                    rows.replay[static_cast<size_t>(m)].begin() + n * k);
  }
  return rows;
}

// Embedding lookup: x[n, :] = E[token[n], :], BF16 like every activation. Padding rows stay
// exactly zero through the whole network (their attention output is zeroed too), so they never
// enter the amax of a 128-token block of the FP8 wgrad quantization (docs/recipe.md section 3).
// A frozen model reads its BF16 (or FP32) copy: the same values as rounding the master.
void Transformer::embed(float* x, const RowLayout& rows) const {
  const int64_t C = config_.d_model;
  const bf16_t* e16 = frozen_ ? embedding_bf16() : nullptr;
  const float* e32 = frozen_ ? embed_f32_.data() : w_.embed;
  for (int64_t n = 0; n < rows.N; ++n) {
    float* row = x + n * C;
    const int64_t token = rows.tokens[static_cast<size_t>(n)];
    if (!rows.is_real[static_cast<size_t>(n)]) {
      std::memset(row, 0, sizeof(float) * static_cast<size_t>(C));
    } else if (e16 != nullptr) {
      for (int64_t i = 0; i < C; ++i) row[i] = bf16_to_f32(e16[token * C + i]);
    } else {
      std::memcpy(row, e32 + token * C, sizeof(float) * static_cast<size_t>(C));
    }
  }
  round_activations(x, rows.N * C);
}

Transformer::E4m3Qkv Transformer::round_qkv_to_e4m3(int64_t l, const LayerActs& a, int64_t N) const {
  const int64_t Hq = config_.n_heads, Hkv = config_.n_kv_heads, D = config_.head_dim;
  const int64_t QD = Hq * D, KD = Hkv * D;
  const AttentionE4m3Scales& sc = attention_e4m3_[static_cast<size_t>(l)];
  const size_t need = static_cast<size_t>(2 * N * (QD + 2 * KD));
  if (e4m3_qkv_.size() < need) e4m3_qkv_ = AlignedBuffer<float>(need);
  float* codes = e4m3_qkv_.data();  // [N, QD], [N, KD], [N, KD] codes, then the same scaled
  float* scaled = codes + N * (QD + 2 * KD);
  E4m3Qkv r{a.q.data(), codes + N * QD, codes + N * (QD + KD), a.q.data(), scaled + N * QD,
            scaled + N * (QD + KD), {}, {}};
  if (!sc.q.empty()) {
    round_heads_to_e4m3(a.q.data(), scaled, codes, N, Hq, D, Hq / Hkv, sc.q);
    r.q_codes = codes;
    r.q = scaled;
  }
  round_heads_to_e4m3(a.k.data(), const_cast<float*>(r.k), const_cast<float*>(r.k_codes), N, Hkv, D, 1, sc.k);
  round_heads_to_e4m3(a.v.data(), const_cast<float*>(r.v), const_cast<float*>(r.v_codes), N, Hkv, D, 1, sc.v);
  for (int64_t g = 0; g < Hkv; ++g) {  // as GenerationEngine::forward_rows computes them
    const float k_scale = sc.k[static_cast<size_t>(g)];
    r.score_scales.push_back(attention_score_scale(D, k_scale, sc.q.empty() ? 1.0f : sc.q[static_cast<size_t>(g)]));
    r.value_scales.push_back(sc.v[static_cast<size_t>(g)]);
  }
  return r;
}

Transformer::QkvAmax Transformer::layer_forward(int64_t l, const float* x, LayerActs& a, float* x_next, float* tmp,
                                                const RowLayout& rows, bool save_for_backward, bool stop_after_qkv,
                                                const LayerActs* saved) const {
  const int64_t N = rows.N, C = config_.d_model, F = config_.d_ff, Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  const int64_t D = config_.head_dim;
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const LayerLinears& ll = linears_[static_cast<size_t>(l)];
  // Attention block.
  const bool bf16_acts = policy_.activations == Precision::kBF16;
  const bool bf16_attention = policy_.attention == Precision::kBF16;
  rmsnorm_forward(a.h1.data(), a.rstd1.data(), x, lw.attn_norm, N, C, config_.norm_eps, bf16_acts);
  // q, k and v read h1, gate and up read h2: each input is converted to BF16 or FP8 once where
  // the linears' precisions allow.
  auto same_x = [](const Linear& l, const Linear& first, const LinearCache& c) {
    return l.can_share_input(first) ? &c : nullptr;
  };
  ll.q.forward(config_.qk_norm ? a.q_raw.data() : a.q.data(), a.h1.data(), N, a.cq, save_for_backward);
  ll.k.forward(config_.qk_norm ? a.k_raw.data() : a.k.data(), a.h1.data(), N, a.ck, save_for_backward,
               same_x(ll.k, ll.q, a.cq));
  ll.v.forward(a.v.data(), a.h1.data(), N, a.cv, save_for_backward, same_x(ll.v, ll.q, a.cq));
  if (config_.qk_norm) {
    rmsnorm_forward(a.q.data(), a.q_rstd.data(), a.q_raw.data(), lw.q_norm, N * Hq, D, config_.norm_eps);
    rmsnorm_forward(a.k.data(), a.k_rstd.data(), a.k_raw.data(), lw.k_norm, N * Hkv, D, config_.norm_eps);
  }
  rope_forward(a.q.data(), rows.positions.data(), N, Hq, D, rope_);
  rope_forward(a.k.data(), rows.positions.data(), N, Hkv, D, rope_);
  round_activations(a.q.data(), N * Hq * D);
  round_activations(a.k.data(), N * Hkv * D);
  QkvAmax amax;
  amax.q = amax_rows(a.q.data(), Hq, D, rows.real_rows, amax.q_heads);
  amax.k = amax_rows(a.k.data(), Hkv, D, rows.real_rows, amax.k_heads);
  amax.v = amax_rows(a.v.data(), Hkv, D, rows.real_rows, amax.v_heads);
  if (stop_after_qkv) return amax;
  // Attention reads q, k, v, or with attention_e4m3_ their E4M3 code values with the scales applied
  // per KV head to the scores and outputs, the generator's FP8 attention arithmetic.
  const float *q_att = a.q.data(), *k_att = a.k.data(), *v_att = a.v.data();
  std::optional<E4m3Qkv> e4m3;
  AttentionHeadScales head_scales;
  if (!attention_e4m3_.empty()) {
    e4m3 = round_qkv_to_e4m3(l, a, N);
    q_att = e4m3->q_codes, k_att = e4m3->k_codes, v_att = e4m3->v_codes;
    head_scales = {e4m3->score_scales.data(), e4m3->value_scales.data()};
  }
  const AttentionHeadScales* scales = e4m3 ? &head_scales : nullptr;
  if (saved != nullptr) {  // checkpointing's recomputation: the first forward's output, exactly
    if (!saved->att_saved_bf16.empty()) {
      for (int64_t i = 0; i < N * Hq * D; ++i) a.att[static_cast<size_t>(i)] = bf16_to_f32(saved->att_saved_bf16[static_cast<size_t>(i)]);
    } else {
      std::memcpy(a.att.data(), saved->att_saved_f32.data(), sizeof(float) * static_cast<size_t>(N * Hq * D));
    }
  } else if (rows.context_begin.empty()) {
    attention_forward(a.att.data(), q_att, k_att, v_att, rows.shape, bf16_attention, scales);
  } else {
    prefix_attention_forward(a.att.data(), q_att, k_att, v_att, rows.context_begin, rows.context, Hq, Hkv, D,
                             bf16_attention, scales, a.kv_words);
  }
  round_activations(a.att.data(), N * Hq * D);
  for (int64_t n = 0; n < N; ++n)
    if (!rows.is_real[static_cast<size_t>(n)]) std::memset(a.att.data() + n * Hq * D, 0, sizeof(float) * static_cast<size_t>(Hq * D));
  ll.o.forward(tmp, a.att.data(), N, a.co, save_for_backward);
  add_into(a.x_mid.data(), x, tmp, N * C, bf16_acts);
  // MLP block.
  rmsnorm_forward(a.h2.data(), a.rstd2.data(), a.x_mid.data(), lw.mlp_norm, N, C, config_.norm_eps, bf16_acts);
  if (ll.is_moe) {
    const int32_t* replay = rows.replay.empty() ? nullptr : rows.replay[static_cast<size_t>(ll.moe_index)].data();
    ll.moe.forward(tmp, a.h2.data(), N, a.moe, save_for_backward, replay);
  } else {
    ll.gate.forward(a.g.data(), a.h2.data(), N, a.cgate, save_for_backward);
    ll.up.forward(a.u.data(), a.h2.data(), N, a.cup, save_for_backward, same_x(ll.up, ll.gate, a.cgate));
    swiglu_forward(a.s.data(), a.g.data(), a.u.data(), N * F, bf16_acts);
    ll.down.forward(tmp, a.s.data(), N, a.cdown, save_for_backward);
  }
  add_into(x_next, a.x_mid.data(), tmp, N * C, bf16_acts);
  return amax;
}

void Transformer::forward(const TokenBatch& batch, float* logprobs, bool for_backward) {
  rows_ = batch_layout(batch, "forward");
  const int64_t N = rows_.N, C = config_.d_model;
  batch_ = batch;
  saved_for_backward_ = for_backward && !frozen_;
  qkv_amax_.assign(static_cast<size_t>(config_.n_layers), QkvAmax{});
  routing_.clear();
  load_balance_.reset();
  // After layer l's forward into `a`: an MoE layer's experts of every row, and its load.
  const auto record_routing = [&](int64_t l, const LayerActs& a) {
    if (!linears_[static_cast<size_t>(l)].is_moe) return;
    routing_.push_back(a.moe.routing.router_choice());
    load_balance_.add_layer(a.moe.routing, rows_.is_real.data());
  };
  ensure(backward_scratch_.tmp, N * C);  // [N, C] projection output before the residual add
  if (!saved_for_backward_) {
    // Nothing is kept for a backward: the layers run in place on one [N, C] buffer with one layer's
    // activations (the same arithmetic, so the same log-probs and calibration).
    B_ = batch.B, T_ = batch.T;
    ensure_layer_acts(recompute_acts_, N);
    ensure(x_final_, N * C), ensure(hf_, N * C), ensure(rstd_f_, N), ensure(lse_, N);
    embed(x_final_.data(), rows_);
    for (int64_t l = 0; l < config_.n_layers; ++l) {
      qkv_amax_[static_cast<size_t>(l)] =
          layer_forward(l, x_final_.data(), recompute_acts_, x_final_.data(), backward_scratch_.tmp.data(), rows_,
                        /*save_for_backward=*/false, /*stop_after_qkv=*/false);
      record_routing(l, recompute_acts_);
    }
    final_norm(hf_.data(), rstd_f_.data(), x_final_.data(), N);
    lm_head_logprobs_forward(lm_head_, hf_.data(), N, batch.targets.data(), logprobs, lse_.data(), head_scratch_);
    return;
  }
  resize_activations(batch.B, batch.T);
  // With checkpointing under BF16 activations the layers run in place on x_final_, each keeping
  // its input as BF16; otherwise each layer's input is its own FP32 buffer.
  const bool bf16_inputs = checkpointing_ && policy_.activations == Precision::kBF16;
  const auto input = [&](int64_t l) {
    return bf16_inputs || l == config_.n_layers ? x_final_.data() : acts_[static_cast<size_t>(l)].x.data();
  };
  embed(input(0), rows_);
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    // With checkpointing every layer runs in the one LayerActs that backward recomputes into, and
    // keeps nothing for backward (its column-wise copies are made again there).
    LayerActs& a = checkpointing_ ? recompute_acts_ : acts_[static_cast<size_t>(l)];
    LayerActs& keep = acts_[static_cast<size_t>(l)];
    if (bf16_inputs) bf16_encode_f32(input(l), keep.x_bf16.data(), N * C);  // BF16 values: exact
    qkv_amax_[static_cast<size_t>(l)] = layer_forward(l, input(l), a, input(l + 1), backward_scratch_.tmp.data(), rows_,
                                                      saved_for_backward_ && !checkpointing_, /*stop_after_qkv=*/false);
    record_routing(l, a);
    if (checkpointing_) {  // the attention output too: the recomputation need not attend again
      const int64_t n = N * config_.q_dim();
      if (policy_.activations == Precision::kBF16) {
        bf16_encode_f32(a.att.data(), keep.att_saved_bf16.data(), n);  // BF16 values: exact
      } else {
        std::memcpy(keep.att_saved_f32.data(), a.att.data(), sizeof(float) * static_cast<size_t>(n));
      }
    }
  }
  final_norm(hf_.data(), rstd_f_.data(), x_final_.data(), N);
  lm_head_logprobs_forward(lm_head_, hf_.data(), N, batch.targets.data(), logprobs, lse_.data(), head_scratch_);
}

void Transformer::final_norm(float* hf, float* rstd, const float* x, int64_t N) const {
  const int64_t C = config_.d_model;
  rmsnorm_forward(hf, rstd, x, w_.final_norm, N, C, config_.norm_eps);
  if (lm_head_.precision() != Precision::kF32) round_activations(hf, N * C);  // the head reads BF16 inputs
}

void Transformer::logits(const std::vector<int64_t>& rows, float* out) {
  FP8RL_CHECK(B_ > 0, "logits called before forward");
  const int64_t C = config_.d_model, n = static_cast<int64_t>(rows.size());
  std::vector<float> x(static_cast<size_t>(n * C));
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rows[static_cast<size_t>(i)];
    FP8RL_CHECK(r >= 0 && r < B_ * T_, "logits: row {} outside the last forward's {} rows", r, B_ * T_);
    std::copy(hf_.data() + r * C, hf_.data() + (r + 1) * C, x.data() + i * C);
  }
  lm_head_logits(lm_head_, x.data(), n, out, head_scratch_);
}

Transformer::RowLayout Transformer::prefix_layout(const TokenBatch& batch, const RowLayout& padded,
                                                  std::vector<int32_t>* row_of) {
  // One row per distinct (parent row, token, position, replayed experts), parents first.
  RowLayout rows;
  std::map<std::tuple<int32_t, int32_t, int32_t, int32_t>, int32_t> child;  // (parent or -1, token, position, record)
  rows.context_begin = {0};
  // Router replay: each distinct record of a row (its experts in every MoE layer) gets an id, so
  // that rows replaying different experts are never shared.
  const int64_t k = config_.experts_per_token;
  std::map<std::vector<int32_t>, int32_t> record_ids;
  std::vector<int32_t> record;  // a row's experts, MoE layer by layer
  rows.replay.resize(padded.replay.size());
  if (row_of != nullptr) row_of->assign(static_cast<size_t>(batch.B * batch.T), -1);
  for (int64_t b = 0; b < batch.B; ++b) {
    int32_t parent = -1;
    for (int32_t t = 0; t < batch.lengths[static_cast<size_t>(b)]; ++t) {
      const size_t src = static_cast<size_t>(b * batch.T + t);
      record.clear();
      for (const std::vector<int32_t>& layer : padded.replay)
        record.insert(record.end(), layer.begin() + static_cast<int64_t>(src) * k,
                      layer.begin() + (static_cast<int64_t>(src) + 1) * k);
      const int32_t record_id =
          padded.replay.empty() ? 0
                                : record_ids.try_emplace(record, static_cast<int32_t>(record_ids.size())).first->second;
      const auto [it, added] = child.try_emplace({parent, padded.tokens[src], padded.positions[src], record_id},
                                                 static_cast<int32_t>(rows.N));
      if (added) {
        rows.tokens.push_back(padded.tokens[src]);
        rows.positions.push_back(padded.positions[src]);
        for (size_t m = 0; m < padded.replay.size(); ++m)
          rows.replay[m].insert(rows.replay[m].end(), record.begin() + static_cast<int64_t>(m) * k,
                                record.begin() + static_cast<int64_t>(m + 1) * k);
        if (parent >= 0)
          for (int64_t i = rows.context_begin[static_cast<size_t>(parent)];
               i < rows.context_begin[static_cast<size_t>(parent) + 1]; ++i) {
            const int32_t ancestor = rows.context[static_cast<size_t>(i)];
            rows.context.push_back(ancestor);
          }
        rows.context.push_back(static_cast<int32_t>(rows.N));
        rows.context_begin.push_back(static_cast<int64_t>(rows.context.size()));
        ++rows.N;
      }
      parent = it->second;
      if (row_of != nullptr) (*row_of)[src] = parent;
    }
  }
  rows.is_real.assign(static_cast<size_t>(rows.N), 1);
  rows.real_rows.resize(static_cast<size_t>(rows.N));
  for (int64_t n = 0; n < rows.N; ++n) rows.real_rows[static_cast<size_t>(n)] = static_cast<int32_t>(n);
  // Buffers sized for N rounded up to 256 rows, so that the next steps' slightly different N reuse them.
  const int64_t capacity = (std::max<int64_t>(rows.N, 1) + 255) / 256 * 256;
  ensure_layer_acts(calib_acts_, capacity);
  ensure(calib_tmp_, capacity * config_.d_model);
  return rows;
}

void Transformer::set_attention_e4m3_scales(std::vector<AttentionE4m3Scales> scales) {
  FP8RL_CHECK(scales.empty() || static_cast<int64_t>(scales.size()) == config_.n_layers,
              "attention E4M3 scales: {} layers, the model has {}", scales.size(), config_.n_layers);
  const auto hkv = static_cast<size_t>(config_.n_kv_heads);
  for (size_t l = 0; l < scales.size(); ++l) {
    const AttentionE4m3Scales& s = scales[l];
    FP8RL_CHECK((s.q.empty() || s.q.size() == hkv) && s.k.size() == hkv && s.v.size() == hkv,
                "attention E4M3 scales of layer {}: {} q, {} k, {} v scales, expected {} each (q may be empty)", l,
                s.q.size(), s.k.size(), s.v.size(), hkv);
    for (const std::vector<float>* v : {&s.q, &s.k, &s.v})
      for (float x : *v)
        FP8RL_CHECK(std::isfinite(x) && x > 0.0f, "attention E4M3 scales of layer {}: {} is not finite and > 0", l, x);
  }
  attention_e4m3_ = std::move(scales);
}

std::vector<Transformer::QkvAmax> Transformer::qkv_amax(const TokenBatch& batch) {
  const RowLayout rows = prefix_layout(batch, batch_layout(batch, "qkv_amax"), nullptr);
  QkvAmax zero;
  zero.q_heads.assign(static_cast<size_t>(config_.n_heads), 0.0f);
  zero.k_heads.assign(static_cast<size_t>(config_.n_kv_heads), 0.0f);
  zero.v_heads = zero.k_heads;
  std::vector<QkvAmax> amax(static_cast<size_t>(config_.n_layers), zero);
  if (rows.N == 0) return amax;  // no real token: forward() records zeros too
  embed(calib_acts_.x.data(), rows);
  for (int64_t l = 0; l < config_.n_layers; ++l)
    amax[static_cast<size_t>(l)] =
        layer_forward(l, calib_acts_.x.data(), calib_acts_, calib_acts_.x.data(), calib_tmp_.data(), rows,
                      /*save_for_backward=*/false, /*stop_after_qkv=*/l + 1 == config_.n_layers);
  return amax;
}

void Transformer::prefix_logprobs(const TokenBatch& batch, float* logprobs) {
  std::vector<int32_t> row_of;
  const RowLayout rows = prefix_layout(batch, batch_layout(batch, "prefix_logprobs"), &row_of);
  std::fill(logprobs, logprobs + batch.B * batch.T, 0.0f);
  if (rows.N == 0) return;
  const int64_t N = rows.N, C = config_.d_model;
  embed(calib_acts_.x.data(), rows);
  for (int64_t l = 0; l < config_.n_layers; ++l)
    layer_forward(l, calib_acts_.x.data(), calib_acts_, calib_acts_.x.data(), calib_tmp_.data(), rows,
                  /*save_for_backward=*/false, /*stop_after_qkv=*/false);
  // Every scored position takes its log-prob from its prefix row's final hidden state (rows shared
  // by several sequences may be scored on different targets, so each scored position gets its own
  // copy of the row: the head's rows are independent, so the bits are those of the padded forward).
  std::vector<int32_t> targets, at;
  for (size_t i = 0; i < row_of.size(); ++i) {
    if (row_of[i] < 0 || batch.targets[i] < 0) continue;
    targets.push_back(batch.targets[i]);
    at.push_back(static_cast<int32_t>(i));
  }
  const int64_t S = static_cast<int64_t>(targets.size());
  std::vector<float> hf(static_cast<size_t>(N * C)), rstd(static_cast<size_t>(N));
  final_norm(hf.data(), rstd.data(), calib_acts_.x.data(), N);
  std::vector<float> scored(static_cast<size_t>(S * C)), lp(static_cast<size_t>(S)), lse(static_cast<size_t>(S));
  for (int64_t j = 0; j < S; ++j) {
    const int64_t r = row_of[static_cast<size_t>(at[static_cast<size_t>(j)])];
    std::copy(hf.data() + r * C, hf.data() + (r + 1) * C, scored.data() + j * C);
  }
  lm_head_logprobs_forward(lm_head_, scored.data(), S, targets.data(), lp.data(), lse.data(), head_scratch_);
  for (int64_t j = 0; j < S; ++j) logprobs[at[static_cast<size_t>(j)]] = lp[static_cast<size_t>(j)];
}

void Transformer::layer_backward(int64_t l, const float* x, const LayerActs& a, float* dx, BackwardScratch& w,
                                 bool write_grads) {
  const int64_t N = B_ * T_, C = config_.d_model, F = config_.d_ff, Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  const int64_t D = config_.head_dim;
  const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
  const LayerWeights& lg = g_.layers[static_cast<size_t>(l)];
  const LayerLinears& ll = linears_[static_cast<size_t>(l)];
  float *dx_mid = w.dx_mid.data(), *dh = w.dh.data(), *ds = w.ds.data(), *dg = w.dg.data(), *du = w.du.data();
  float *datt = w.datt.data(), *dq = w.dq.data(), *dk = w.dk.data(), *dv = w.dv.data();
  float *dq_raw = w.dq_raw.data(), *dk_raw = w.dk_raw.data();
  const size_t residual_bytes = sizeof(float) * static_cast<size_t>(N * C);
  const bool add = !write_grads;  // the dense linears' weight gradients: added, or written
  // x_next = x_mid + down(swiglu(gate(h2), up(h2))), h2 = norm(x_mid)
  if (ll.is_moe) {
    MoeWeights grads = lg.moe;
    if (router_frozen_) grads.router = nullptr;
    ll.moe.backward(dh, /*accumulate_dh=*/false, dx, a.moe, grads, w.moe,
                    w.aux_dprobs.empty() ? nullptr : w.aux_dprobs.data());
  } else {
    ll.down.backward(ds, /*accumulate_dx=*/false, lg.w_down, dx, N, a.cdown, add);
    swiglu_backward(dg, du, ds, a.g.data(), a.u.data(), N * F);
    ll.gate.backward(dh, /*accumulate_dx=*/false, lg.w_gate, dg, N, a.cgate, add);
    ll.up.backward(dh, /*accumulate_dx=*/true, lg.w_up, du, N, a.cup, add);
  }
  std::memcpy(dx_mid, dx, residual_bytes);
  rmsnorm_backward(dx_mid, lg.mlp_norm, dh, a.x_mid.data(), lw.mlp_norm, a.rstd2.data(), N, C, /*accumulate_dx=*/true);
  // x_mid = x + o(attention(rope(norm(q(h1))), rope(norm(k(h1))), v(h1))), h1 = norm(x)
  ll.o.backward(datt, /*accumulate_dx=*/false, lg.wo, dx_mid, N, a.co, add);
  const AttentionShape shape{B_, T_, Hq, Hkv, D};
  const bool bf16_attention = policy_.attention == Precision::kBF16;
  if (attention_e4m3_.empty()) {
    attention_backward(dq, dk, dv, datt, a.q.data(), a.k.data(), a.v.data(), shape, bf16_attention);
  } else {
    // P from the code values and head scales the forward attended with; the gradient flows
    // straight through the rounding to the scaled values.
    const E4m3Qkv e = round_qkv_to_e4m3(l, a, N);
    const AttentionHeadScales scales{e.score_scales.data(), e.value_scales.data()};
    const AttentionForwardInputs forward{e.q_codes, e.k_codes, e.v_codes, &scales};
    attention_backward(dq, dk, dv, datt, e.q, e.k, e.v, shape, bf16_attention, &forward);
  }
  rope_backward(dq, batch_.positions.data(), N, Hq, D, rope_);
  rope_backward(dk, batch_.positions.data(), N, Hkv, D, rope_);
  const float* dq_in = dq;
  const float* dk_in = dk;
  if (config_.qk_norm) {
    rmsnorm_backward(dq_raw, lg.q_norm, dq, a.q_raw.data(), lw.q_norm, a.q_rstd.data(), N * Hq, D,
                     /*accumulate_dx=*/false);
    rmsnorm_backward(dk_raw, lg.k_norm, dk, a.k_raw.data(), lw.k_norm, a.k_rstd.data(), N * Hkv, D,
                     /*accumulate_dx=*/false);
    dq_in = dq_raw;
    dk_in = dk_raw;
  }
  ll.q.backward(dh, /*accumulate_dx=*/false, lg.wq, dq_in, N, a.cq, add, lg.bq);
  ll.k.backward(dh, /*accumulate_dx=*/true, lg.wk, dk_in, N, a.ck, add, lg.bk);
  ll.v.backward(dh, /*accumulate_dx=*/true, lg.wv, dv, N, a.cv, add, lg.bv);
  std::memcpy(dx, dx_mid, residual_bytes);
  rmsnorm_backward(dx, lg.attn_norm, dh, x, lw.attn_norm, a.rstd1.data(), N, C, /*accumulate_dx=*/true);
}

void Transformer::backward(const float* dlogprobs, EmbeddingRowGrads* embedding_rows, double aux_loss_weight) {
  FP8RL_CHECK(B_ > 0, "backward called before forward");
  FP8RL_CHECK(!frozen_, "a frozen model has no backward");
  FP8RL_CHECK(saved_for_backward_, "backward after a forward that did not save for backward (for_backward false)");
  FP8RL_CHECK(!grads_.empty(), "backward: gradients were released (release_grads): call zero_grads first");
  const int64_t N = B_ * T_, C = config_.d_model, F = config_.d_ff;
  const int64_t QD = config_.q_dim(), KD = config_.kv_dim();
  // Gradient buffers, kept for the next call (every element is written before it is read).
  BackwardScratch& w = backward_scratch_;
  ensure(w.dhf, N * C), ensure(w.dx, N * C), ensure(w.dx_mid, N * C), ensure(w.dh, N * C), ensure(w.tmp, N * C);
  ensure(w.ds, N * F), ensure(w.dg, N * F), ensure(w.du, N * F);
  ensure(w.datt, N * QD), ensure(w.dq, N * QD), ensure(w.dk, N * KD), ensure(w.dv, N * KD);
  if (config_.qk_norm) ensure(w.dq_raw, N * QD), ensure(w.dk_raw, N * KD);
  float* dx = w.dx.data();
  // The load-balancing loss: the same gradient of the probabilities at every real row of every MoE
  // layer (moe_load_balance.h), none at padding.
  w.aux_dprobs.clear();
  if (aux_loss_weight != 0.0 && load_balance_.decisions() > 0) {
    const std::vector<float> g = load_balance_.dprobs(aux_loss_weight);
    const int64_t E = config_.num_experts;
    w.aux_dprobs.assign(static_cast<size_t>(N * E), 0.0f);
    for (int32_t n : rows_.real_rows) std::copy(g.begin(), g.end(), w.aux_dprobs.begin() + int64_t{n} * E);
  }

  // After zero_grads() the largest terms are written rather than added to zeros (a product summed
  // from +0 is never -0, so 0 + product is the product's bits): no pass clearing 4 bytes per
  // parameter, none adding a product scratch to them.
  const bool write = clear_grads_for_writing();
  lm_head_logprobs_backward(lm_head_, hf_.data(), N, batch_.targets.data(), lse_.data(), dlogprobs, w.dhf.data(),
                            /*accumulate_dx=*/false, g_.lm_head, /*accumulate_dw=*/!write, head_scratch_);
  rmsnorm_backward(dx, g_.final_norm, w.dhf.data(), x_final_.data(), w_.final_norm, rstd_f_.data(), N, C,
                   /*accumulate_dx=*/false);

  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    const float* x = acts_[static_cast<size_t>(l)].x.data();
    if (checkpointing_ && policy_.activations == Precision::kBF16) {
      // The saved BF16 input back to FP32 into the recomputation's own x (the same values).
      bf16_decode_f32(acts_[static_cast<size_t>(l)].x_bf16.data(), recompute_acts_.x.data(), N * C);
      x = recompute_acts_.x.data();
    }
    if (checkpointing_) {
      // The layer's forward again, from its saved input: the same bits as the first time.
      // w.dh is free here (written before it is read in layer_backward) and holds x_next.
      layer_forward(l, x, recompute_acts_, w.dh.data(), w.tmp.data(), rows_, /*save_for_backward=*/true,
                    /*stop_after_qkv=*/false, &acts_[static_cast<size_t>(l)]);
      layer_backward(l, x, recompute_acts_, dx, w, write);
    } else {
      layer_backward(l, x, acts_[static_cast<size_t>(l)], dx, w, write);
    }
  }
  // Embedding: dE[token, :] += (the sum over the rows n holding `token` of dx[n, :]), one term
  // per distinct token (the gradient contract in transformer.h).
  EmbeddingRowGrads local;
  EmbeddingRowGrads& term = embedding_rows != nullptr ? *embedding_rows : local;
  term.tokens.clear();
  term.rows.clear();
  std::unordered_map<int32_t, int64_t> slot_of;
  for (int64_t n = 0; n < N; ++n) {
    const int32_t token = batch_.tokens[static_cast<size_t>(n)];
    auto [it, added] = slot_of.try_emplace(token, static_cast<int64_t>(term.tokens.size()));
    if (added) {
      term.tokens.push_back(token);
      term.rows.resize(term.rows.size() + static_cast<size_t>(C), 0.0f);
    }
    float* sum = term.rows.data() + it->second * C;
    for (int64_t i = 0; i < C; ++i) sum[i] += dx[n * C + i];
  }
  if (embedding_rows == nullptr) add_embedding_rows(term);
}

void Transformer::add_embedding_rows(const EmbeddingRowGrads& rows) {
  FP8RL_CHECK(!grads_.empty(), "add_embedding_rows: gradients were released (release_grads): call zero_grads first");
  grads();  // clears a buffer zero_grads() marked
  const int64_t C = config_.d_model;
  FP8RL_CHECK(rows.rows.size() == rows.tokens.size() * static_cast<size_t>(C),
              "add_embedding_rows: {} values for {} tokens of width {}", rows.rows.size(), rows.tokens.size(), C);
  for (size_t k = 0; k < rows.tokens.size(); ++k) {
    const int32_t token = rows.tokens[k];
    FP8RL_CHECK(token >= 0 && token < config_.vocab_size, "add_embedding_rows: token {} outside the vocabulary of {}",
                token, config_.vocab_size);
    float* row = g_.embed + token * C;
    const float* sum = rows.rows.data() + static_cast<int64_t>(k) * C;
    for (int64_t i = 0; i < C; ++i) row[i] += sum[i];
  }
}

}  // namespace fp8rl
