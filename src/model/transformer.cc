#include "model/transformer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/check.h"
#include "core/rng.h"
#include "kernels/logprob.h"
#include "kernels/rmsnorm.h"
#include "kernels/swiglu.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {
void ensure(AlignedBuffer<float>& buf, int64_t n) {
  if (buf.size() != static_cast<size_t>(n)) buf = AlignedBuffer<float>(static_cast<size_t>(n));
}
void add_into(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}
// Largest |x| over the first `rows` rows of a [*, width] buffer that have a real token.
float amax_rows(const float* x, int64_t width, const std::vector<int32_t>& real_rows) {
  float m = 0.0f;
  for (int32_t r : real_rows)
    for (int64_t i = 0; i < width; ++i) m = std::max(m, std::fabs(x[r * width + i]));
  return m;
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
  const bool round = policy_.activations == Precision::kBF16;
  const int64_t C = config_.d_model, F = config_.d_ff;
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    auto make = [&](const char* suffix, int64_t n, int64_t k) {
      std::string name = layer_param_name(l, suffix);
      const Precision p = policy_.linear_precision(l, config_.n_layers, name);
      return Linear(name, n, k, p, policy_.weight_scale_format, policy_.activation_scale_format, round);
    };
    linears_.push_back({make("self_attn.q_proj.weight", config_.q_dim(), C),
                        make("self_attn.k_proj.weight", config_.kv_dim(), C),
                        make("self_attn.v_proj.weight", config_.kv_dim(), C),
                        make("self_attn.o_proj.weight", C, config_.q_dim()), make("mlp.gate_proj.weight", F, C),
                        make("mlp.up_proj.weight", F, C), make("mlp.down_proj.weight", C, F)});
  }
  const Precision head = policy_.fp32_lm_head || policy_.activations == Precision::kF32 ? Precision::kF32 : Precision::kBF16;
  lm_head_ = Linear(config_.tie_embeddings ? "model.embed_tokens.weight" : "lm_head.weight", config_.vocab_size, C,
                    head, policy_.weight_scale_format, policy_.activation_scale_format, /*round_output_bf16=*/false);
  rope_ = rope_table(config_.head_dim, config_.max_seq_len, config_.rope_theta,
                     config_.rope_llama3_scaling ? &config_.rope_scaling : nullptr);
  refresh_weights();
}

void Transformer::init_random(uint64_t seed) {
  const double out_scale = 1.0 / std::sqrt(2.0 * static_cast<double>(config_.n_layers));
  uint64_t stream = 0;
  for (const ParamInfo& p : layout_.tensors()) {
    float* data = params_.data() + p.offset;
    const int64_t n = p.shape.numel();
    if (p.shape.rank == 1) {
      std::fill(data, data + n, 1.0f);  // norm weights
    } else {
      const bool output_proj = p.name.find("o_proj") != std::string::npos || p.name.find("down_proj") != std::string::npos;
      fill_normal(data, n, 0.0f, static_cast<float>(0.02 * (output_proj ? out_scale : 1.0)), seed, stream);
    }
    ++stream;
  }
  refresh_weights();
}

void Transformer::refresh_weights() {
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    LayerLinears& ll = linears_[static_cast<size_t>(l)];
    ll.q.refresh_weights(lw.wq);
    ll.k.refresh_weights(lw.wk);
    ll.v.refresh_weights(lw.wv);
    ll.o.refresh_weights(lw.wo);
    ll.gate.refresh_weights(lw.w_gate);
    ll.up.refresh_weights(lw.w_up);
    ll.down.refresh_weights(lw.w_down);
  }
  lm_head_.refresh_weights(w_.lm_head);
}

void Transformer::zero_grads() { std::memset(grads_.data(), 0, grads_.size() * sizeof(float)); }

std::vector<Transformer::NamedLinear> Transformer::linears() const {
  std::vector<NamedLinear> out;
  for (const LayerLinears& ll : linears_)
    for (const Linear* lin : {&ll.q, &ll.k, &ll.v, &ll.o, &ll.gate, &ll.up, &ll.down}) out.push_back({lin->name(), lin});
  out.push_back({lm_head_.name(), &lm_head_});
  return out;
}

void Transformer::round_activations(float* x, int64_t n) const {
  if (policy_.activations == Precision::kBF16) bf16_round_f32(x, n);
}

void Transformer::resize_activations(int64_t B, int64_t T) {
  const int64_t N = B * T, C = config_.d_model, F = config_.d_ff;
  const int64_t QD = config_.q_dim(), KD = config_.kv_dim(), Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  acts_.resize(static_cast<size_t>(config_.n_layers));
  for (LayerActs& a : acts_) {
    ensure(a.x, N * C), ensure(a.h1, N * C), ensure(a.rstd1, N);
    if (config_.qk_norm) ensure(a.q_raw, N * QD), ensure(a.k_raw, N * KD), ensure(a.q_rstd, N * Hq), ensure(a.k_rstd, N * Hkv);
    ensure(a.q, N * QD), ensure(a.k, N * KD), ensure(a.v, N * KD), ensure(a.probs, B * Hq * T * T);
    ensure(a.att, N * QD), ensure(a.x_mid, N * C), ensure(a.h2, N * C), ensure(a.rstd2, N);
    ensure(a.g, N * F), ensure(a.u, N * F), ensure(a.s, N * F);
  }
  ensure(x_final_, N * C), ensure(hf_, N * C), ensure(rstd_f_, N), ensure(logits_, N * config_.vocab_size);
  B_ = B;
  T_ = T;
}

void Transformer::forward(const TokenBatch& batch, float* logprobs) {
  const int64_t B = batch.B, T = batch.T, N = B * T;
  FP8RL_CHECK(B > 0 && T > 0, "forward: empty batch B={} T={}", B, T);
  FP8RL_CHECK(batch.tokens.size() == static_cast<size_t>(N) && batch.targets.size() == static_cast<size_t>(N) &&
                  batch.positions.size() == static_cast<size_t>(N),
              "forward: batch arrays must have B*T = {} entries (tokens {}, targets {}, positions {})", N,
              batch.tokens.size(), batch.targets.size(), batch.positions.size());
  FP8RL_CHECK(T <= config_.max_seq_len, "forward: {} positions exceed max_seq_len {}", T, config_.max_seq_len);
  resize_activations(B, T);
  batch_ = batch;
  const int64_t C = config_.d_model, F = config_.d_ff, Hq = config_.n_heads, Hkv = config_.n_kv_heads, D = config_.head_dim;
  const AttentionShape shape{B, T, Hq, Hkv, D};
  FP8RL_CHECK(batch.lengths.size() == static_cast<size_t>(B), "forward: batch needs {} lengths, got {}", B,
              batch.lengths.size());
  std::vector<int32_t> real_rows;  // rows holding a real token (not padding)
  for (int64_t b = 0; b < B; ++b) {
    const int32_t len = batch.lengths[static_cast<size_t>(b)];
    FP8RL_CHECK(len >= 0 && len <= T, "forward: sequence {} has length {} outside [0, {}]", b, len, T);
    for (int32_t t = 0; t < len; ++t) real_rows.push_back(static_cast<int32_t>(b * T + t));
  }

  // Embedding lookup: x[n, :] = E[token[n], :], BF16 like every activation. Padding rows stay
  // exactly zero through the whole network (their attention output is zeroed too), so they never
  // enter the amax of a 128-token block of the FP8 wgrad quantization (fp8-recipe.md section 3).
  float* x0 = acts_[0].x.data();
  std::vector<uint8_t> is_real(static_cast<size_t>(N), 0);
  for (int32_t r : real_rows) is_real[static_cast<size_t>(r)] = 1;
  for (int64_t n = 0; n < N; ++n)
    FP8RL_CHECK(is_real[static_cast<size_t>(n)] || batch.targets[static_cast<size_t>(n)] < 0,
                "forward: row {} is padding (beyond its sequence's length) but has target {}", n,
                batch.targets[static_cast<size_t>(n)]);
  for (int64_t n = 0; n < N; ++n) {
    const int32_t tok = batch.tokens[static_cast<size_t>(n)];
    FP8RL_CHECK(tok >= 0 && tok < config_.vocab_size, "forward: token id {} at row {} outside the vocabulary of {}",
                tok, n, config_.vocab_size);
    if (is_real[static_cast<size_t>(n)]) {
      std::memcpy(x0 + n * C, w_.embed + tok * C, sizeof(float) * static_cast<size_t>(C));
    } else {
      std::memset(x0 + n * C, 0, sizeof(float) * static_cast<size_t>(C));
    }
  }
  round_activations(x0, N * C);

  qkv_amax_.assign(static_cast<size_t>(config_.n_layers), QkvAmax{});
  std::vector<float> tmp(static_cast<size_t>(N * C));  // [N, C] projection output before the residual add
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    const LayerLinears& ll = linears_[static_cast<size_t>(l)];
    // Attention block.
    rmsnorm_forward(a.h1.data(), a.rstd1.data(), a.x.data(), lw.attn_norm, N, C, config_.norm_eps);
    round_activations(a.h1.data(), N * C);
    ll.q.forward(config_.qk_norm ? a.q_raw.data() : a.q.data(), a.h1.data(), N, a.cq);
    ll.k.forward(config_.qk_norm ? a.k_raw.data() : a.k.data(), a.h1.data(), N, a.ck);
    ll.v.forward(a.v.data(), a.h1.data(), N, a.cv);
    if (config_.qk_norm) {
      rmsnorm_forward(a.q.data(), a.q_rstd.data(), a.q_raw.data(), lw.q_norm, N * Hq, D, config_.norm_eps);
      rmsnorm_forward(a.k.data(), a.k_rstd.data(), a.k_raw.data(), lw.k_norm, N * Hkv, D, config_.norm_eps);
    }
    rope_forward(a.q.data(), batch.positions.data(), N, Hq, D, rope_);
    rope_forward(a.k.data(), batch.positions.data(), N, Hkv, D, rope_);
    round_activations(a.q.data(), N * Hq * D);
    round_activations(a.k.data(), N * Hkv * D);
    qkv_amax_[static_cast<size_t>(l)] = {amax_rows(a.q.data(), Hq * D, real_rows),
                                         amax_rows(a.k.data(), Hkv * D, real_rows),
                                         amax_rows(a.v.data(), Hkv * D, real_rows)};
    attention_forward(a.att.data(), a.probs.data(), a.q.data(), a.k.data(), a.v.data(), shape);
    round_activations(a.att.data(), N * Hq * D);
    for (int64_t n = 0; n < N; ++n)
      if (!is_real[static_cast<size_t>(n)]) std::memset(a.att.data() + n * Hq * D, 0, sizeof(float) * static_cast<size_t>(Hq * D));
    ll.o.forward(tmp.data(), a.att.data(), N, a.co);
    add_into(a.x_mid.data(), a.x.data(), tmp.data(), N * C);
    round_activations(a.x_mid.data(), N * C);
    // MLP block.
    rmsnorm_forward(a.h2.data(), a.rstd2.data(), a.x_mid.data(), lw.mlp_norm, N, C, config_.norm_eps);
    round_activations(a.h2.data(), N * C);
    ll.gate.forward(a.g.data(), a.h2.data(), N, a.cgate);
    ll.up.forward(a.u.data(), a.h2.data(), N, a.cup);
    swiglu_forward(a.s.data(), a.g.data(), a.u.data(), N * F);
    round_activations(a.s.data(), N * F);
    ll.down.forward(tmp.data(), a.s.data(), N, a.cdown);
    float* x_next = l + 1 < config_.n_layers ? acts_[static_cast<size_t>(l + 1)].x.data() : x_final_.data();
    add_into(x_next, a.x_mid.data(), tmp.data(), N * C);
    round_activations(x_next, N * C);
  }
  rmsnorm_forward(hf_.data(), rstd_f_.data(), x_final_.data(), w_.final_norm, N, C, config_.norm_eps);
  if (!policy_.fp32_lm_head) round_activations(hf_.data(), N * C);
  lm_head_.forward(logits_.data(), hf_.data(), N, c_lm_head_);
  token_logprobs_forward(logprobs, logits_.data(), batch.targets.data(), N, config_.vocab_size);
}

void Transformer::backward(const float* dlogprobs) {
  FP8RL_CHECK(B_ > 0, "backward called before forward");
  const int64_t N = B_ * T_, C = config_.d_model, F = config_.d_ff, Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  const int64_t D = config_.head_dim, QD = config_.q_dim(), KD = config_.kv_dim(), V = config_.vocab_size;
  const AttentionShape shape{B_, T_, Hq, Hkv, D};
  std::vector<float> dlogits(static_cast<size_t>(N * V)), dhf(static_cast<size_t>(N * C));
  std::vector<float> dx(static_cast<size_t>(N * C)), dx_mid(static_cast<size_t>(N * C)), dh(static_cast<size_t>(N * C));
  std::vector<float> ds(static_cast<size_t>(N * F)), dg(static_cast<size_t>(N * F)), du(static_cast<size_t>(N * F));
  std::vector<float> datt(static_cast<size_t>(N * QD)), dq(static_cast<size_t>(N * QD)), dk(static_cast<size_t>(N * KD));
  std::vector<float> dv(static_cast<size_t>(N * KD)), dq_raw, dk_raw;
  if (config_.qk_norm) dq_raw.resize(dq.size()), dk_raw.resize(dk.size());

  token_logprobs_backward(dlogits.data(), dlogprobs, logits_.data(), batch_.targets.data(), N, V);
  lm_head_.backward(dhf.data(), false, g_.lm_head, dlogits.data(), N, c_lm_head_);
  rmsnorm_backward(dx.data(), g_.final_norm, dhf.data(), x_final_.data(), w_.final_norm, rstd_f_.data(), N, C, false);

  for (int64_t l = config_.n_layers - 1; l >= 0; --l) {
    LayerActs& a = acts_[static_cast<size_t>(l)];
    const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
    const LayerWeights& lg = g_.layers[static_cast<size_t>(l)];
    const LayerLinears& ll = linears_[static_cast<size_t>(l)];
    // x_next = x_mid + down(swiglu(gate(h2), up(h2))), h2 = norm(x_mid)
    ll.down.backward(ds.data(), false, lg.w_down, dx.data(), N, a.cdown);
    swiglu_backward(dg.data(), du.data(), ds.data(), a.g.data(), a.u.data(), N * F);
    ll.gate.backward(dh.data(), false, lg.w_gate, dg.data(), N, a.cgate);
    ll.up.backward(dh.data(), true, lg.w_up, du.data(), N, a.cup);
    dx_mid = dx;
    rmsnorm_backward(dx_mid.data(), lg.mlp_norm, dh.data(), a.x_mid.data(), lw.mlp_norm, a.rstd2.data(), N, C, true);
    // x_mid = x + o(attention(rope(norm(q(h1))), rope(norm(k(h1))), v(h1))), h1 = norm(x)
    ll.o.backward(datt.data(), false, lg.wo, dx_mid.data(), N, a.co);
    attention_backward(dq.data(), dk.data(), dv.data(), datt.data(), a.probs.data(), a.q.data(), a.k.data(),
                       a.v.data(), shape);
    rope_backward(dq.data(), batch_.positions.data(), N, Hq, D, rope_);
    rope_backward(dk.data(), batch_.positions.data(), N, Hkv, D, rope_);
    const float* dq_in = dq.data();
    const float* dk_in = dk.data();
    if (config_.qk_norm) {
      rmsnorm_backward(dq_raw.data(), lg.q_norm, dq.data(), a.q_raw.data(), lw.q_norm, a.q_rstd.data(), N * Hq, D, false);
      rmsnorm_backward(dk_raw.data(), lg.k_norm, dk.data(), a.k_raw.data(), lw.k_norm, a.k_rstd.data(), N * Hkv, D, false);
      dq_in = dq_raw.data();
      dk_in = dk_raw.data();
    }
    ll.q.backward(dh.data(), false, lg.wq, dq_in, N, a.cq);
    ll.k.backward(dh.data(), true, lg.wk, dk_in, N, a.ck);
    ll.v.backward(dh.data(), true, lg.wv, dv.data(), N, a.cv);
    dx = dx_mid;
    rmsnorm_backward(dx.data(), lg.attn_norm, dh.data(), a.x.data(), lw.attn_norm, a.rstd1.data(), N, C, true);
  }
  // Embedding: dE[token[n], :] += dx[n, :]
  for (int64_t n = 0; n < N; ++n) {
    float* row = g_.embed + batch_.tokens[static_cast<size_t>(n)] * C;
    for (int64_t i = 0; i < C; ++i) row[i] += dx[static_cast<size_t>(n * C + i)];
  }
}

}  // namespace fp8rl
