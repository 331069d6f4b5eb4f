#include "generation/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>

#include "core/check.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/attention/attention_row.h"
#include "kernels/attention/attention_scales.h"
#include "kernels/elementwise/bias.h"
#include "kernels/gemm/gemm.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/rope.h"
#include "kernels/elementwise/swiglu.h"
#include "model/params.h"
#include "arch/spec.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "numerics/quantize.h"

namespace fp8rl {

namespace {

enum { kQ, kK, kV, kO, kGate, kUp, kDown };  // EngineLayer::lin

// The place in EngineLayer::lin of a dense projection role, or -1.
int lin_index(TensorRole role) {
  switch (role) {
    case TensorRole::kQ: return kQ;
    case TensorRole::kK: return kK;
    case TensorRole::kV: return kV;
    case TensorRole::kO: return kO;
    case TensorRole::kGate: return kGate;
    case TensorRole::kUp: return kUp;
    case TensorRole::kDown: return kDown;
    default: return -1;
  }
}

void copy_floats(AlignedBuffer<float>& dst, const float* src, int64_t n) {
  FP8RL_CHECK(src != nullptr, "generator weights: a required tensor is missing from the refit source");
  if (dst.size() != static_cast<size_t>(n)) dst = AlignedBuffer<float>(static_cast<size_t>(n));
  std::memcpy(dst.data(), src, sizeof(float) * static_cast<size_t>(n));
}

void round_bf16(float* x, int64_t n) { bf16_round_f32(x, n); }

const QkvScales kUnitScales{1.0f, 1.0f, 1.0f, {}, {}, {}};  // a BF16 KV cache's: codes are values

}  // namespace

GenerationEngine::GenerationEngine(const ModelConfig& config, const PrecisionPolicy& policy, const EngineOptions& options)
    : config_(config), policy_(policy), options_(options) {
  config_.validate();
  policy_.validate();
  FP8RL_CHECK(policy_.activations == Precision::kBF16, "the generator runs BF16 activations (policy activations: {})",
              precision_name(policy_.activations));
  FP8RL_CHECK(options_.max_num_seqs >= 1, "max_num_seqs must be >= 1, got {}", options_.max_num_seqs);
  layers_.resize(static_cast<size_t>(config_.n_layers));
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    EngineLayer& layer = layers_[static_cast<size_t>(l)];
    layer.moe = config_.is_moe_layer(l);
    if (layer.moe) layer.moe_index = num_moe_layers_++;
    for (const TensorSpec& t : layer_linears(config_, l)) {
      EngineLinear lin;
      lin.precision = fp8rl::linear_precision(policy_, config_.n_layers, t);
      lin.N = t.shape[0];
      lin.K = t.shape[1];
      switch (t.role) {
        case TensorRole::kRouter: layer.router = std::move(lin); break;
        case TensorRole::kExpertGate: layer.expert_gate.push_back(std::move(lin)); break;
        case TensorRole::kExpertUp: layer.expert_up.push_back(std::move(lin)); break;
        case TensorRole::kExpertDown: layer.expert_down.push_back(std::move(lin)); break;
        default: layer.lin[lin_index(t.role)] = std::move(lin);
      }
    }
  }
  const TensorSpec head = lm_head_linear(config_);
  lm_head_.precision = fp8rl::linear_precision(policy_, config_.n_layers, head);
  lm_head_.N = head.shape[0];
  lm_head_.K = head.shape[1];
  rope_ = rope_table(config_.head_dim, config_.max_seq_len, config_.rope_theta,
                     config_.rope_llama3_scaling ? &config_.rope_scaling : nullptr);
  kv_ = KvCache(config_.n_layers, config_.n_kv_heads, config_.head_dim, options_.kv_dtype, options_.kv_cache_bytes);
}

Precision GenerationEngine::linear_precision(int64_t layer, int64_t index) const {
  return layers_[static_cast<size_t>(layer)].lin[index].precision;
}

void GenerationEngine::load_linear(EngineLinear& dst, const LinearWeightSource& src, int64_t N, int64_t K) {
  FP8RL_CHECK(src.f32 != nullptr || src.fp8 != nullptr || src.bf16 != nullptr,
              "generator weights: a linear [{}, {}] has no source", N, K);
  const GemvOptions gemv{.isa = Isa::kAuto, .threads = 0, .batch_invariant = true};
  if (src.bias != nullptr) {
    copy_floats(dst.bias, src.bias, N);
  } else {
    dst.bias = AlignedBuffer<float>();
  }
  switch (dst.precision) {
    case Precision::kF32:
      copy_floats(dst.f32, src.f32, N * K);
      break;
    case Precision::kBF16:
      if (src.bf16 != nullptr) {  // the trainer's BF16 copy, read in place
        dst.own_bf16 = AlignedBuffer<bf16_t>();
        dst.bf16_rows = src.bf16;
      } else {
        FP8RL_CHECK(src.f32 != nullptr, "generator weights: BF16 linear [{}, {}] needs BF16 or FP32 weights", N, K);
        dst.own_bf16.resize(static_cast<size_t>(N * K));
        bf16_encode_f32(src.f32, dst.own_bf16.data(), N * K);
        dst.bf16_rows = dst.own_bf16.data();
      }
      pack_gemv_weights_bf16(dst.bf16_rows, N, K, K, dst.packed, gemv);
      break;
    case Precision::kFP8: {
      if (src.fp8 != nullptr) {  // the trainer's bytes, read in place
        FP8RL_CHECK(src.fp8->mode == ScalingMode::kBlocks128x128 && src.fp8->rows == N && src.fp8->cols == K,
                    "generator weights: FP8 source {} is not [{}, {}] in 128x128 blocks", src.fp8->str(), N, K);
        dst.own_fp8 = QuantizedTensor();
        dst.fp8_rows = src.fp8;
      } else {
        FP8RL_CHECK(src.f32 != nullptr, "generator weights: FP8 linear [{}, {}] needs FP8 or FP32 weights", N, K);
        QuantizedTensor& rows = dst.own_fp8;
        if (rows.rows() != N || rows.cols() != K || rows.mode() != ScalingMode::kBlocks128x128 ||
            rows.scale_format != policy_.weight_scale_format)
          rows = QuantizedTensor(ScalingMode::kBlocks128x128, N, K, policy_.weight_scale_format,
                                 /*with_columnwise=*/false);
        quantize_into(TensorView::contiguous(const_cast<float*>(src.f32), DType::kF32, Shape{N, K}), rows);
        dst.fp8_rows = &rows.rowwise;
      }
      pack_gemv_weights_fp8(*dst.fp8_rows, dst.packed, gemv);
      break;
    }
  }
}

void GenerationEngine::update_weights(const GeneratorWeightSource& src) {
  FP8RL_CHECK(static_cast<int64_t>(src.layers.size()) == config_.n_layers, "generator weights: {} layers, expected {}",
              src.layers.size(), config_.n_layers);
  const int64_t C = config_.d_model, D = config_.head_dim;
  // The embedding rows as BF16 (the trainer's embedding output is BF16): the source's, or made here.
  if (src.embed_bf16 != nullptr) {
    own_embed_ = AlignedBuffer<bf16_t>();
    embed_ = src.embed_bf16;
  } else {
    FP8RL_CHECK(src.embed != nullptr, "generator weights: the refit source has no embedding");
    own_embed_.resize(static_cast<size_t>(config_.vocab_size * C));
    bf16_encode_f32(src.embed, own_embed_.data(), config_.vocab_size * C);
    embed_ = own_embed_.data();
  }
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    const LayerWeightSource& s = src.layers[static_cast<size_t>(l)];
    EngineLayer& e = layers_[static_cast<size_t>(l)];
    copy_floats(e.attn_norm, s.attn_norm, C);
    copy_floats(e.mlp_norm, s.mlp_norm, C);
    if (config_.qk_norm) {
      copy_floats(e.q_norm, s.q_norm, D);
      copy_floats(e.k_norm, s.k_norm, D);
    }
    const LinearWeightSource* lins[7] = {&s.q, &s.k, &s.v, &s.o, &s.gate, &s.up, &s.down};
    for (int i = 0; i < (e.moe ? 4 : 7); ++i) load_linear(e.lin[i], *lins[i], e.lin[i].N, e.lin[i].K);
    if (!e.moe) continue;
    const size_t E = static_cast<size_t>(config_.num_experts);
    FP8RL_CHECK(s.expert_gate.size() == E && s.expert_up.size() == E && s.expert_down.size() == E,
                "generator weights: MoE layer {} has {} experts in the refit source, expected {}", l,
                s.expert_gate.size(), E);
    load_linear(e.router, s.router, e.router.N, e.router.K);
    for (size_t x = 0; x < E; ++x) {
      load_linear(e.expert_gate[x], s.expert_gate[x], e.expert_gate[x].N, e.expert_gate[x].K);
      load_linear(e.expert_up[x], s.expert_up[x], e.expert_up[x].N, e.expert_up[x].K);
      load_linear(e.expert_down[x], s.expert_down[x], e.expert_down[x].N, e.expert_down[x].K);
    }
  }
  copy_floats(final_norm_, src.final_norm, C);
  // A tied head from the very FP32 rows the embedding was encoded from: its BF16 rows are the
  // embedding's (a trainer's head keeps no BF16 copy of its own).
  LinearWeightSource head = src.lm_head;
  if (head.bf16 == nullptr && head.f32 != nullptr && head.f32 == src.embed && embed_ != nullptr) head.bf16 = embed_;
  load_linear(lm_head_, head, lm_head_.N, lm_head_.K);
  weights_loaded_ = true;
  // New weights make the old Q/K/V scales stale: generation refuses until they are set again.
  kv_.invalidate_scales();
}

void GenerationEngine::release_memory() {
  kv_.release_memory();
  auto release = [](EngineLinear& lin) {
    lin.packed = PackedGemvWeights{}, lin.own_bf16 = {}, lin.own_fp8 = {}, lin.f32 = {}, lin.bias = {};
  };
  for (EngineLayer& layer : layers_) {
    for (EngineLinear& lin : layer.lin) release(lin);
    release(layer.router);
    for (auto* list : {&layer.expert_gate, &layer.expert_up, &layer.expert_down})
      for (EngineLinear& lin : *list) release(lin);
  }
  release(lm_head_);
  own_embed_ = {};
  embed_ = nullptr;
  scratch_ = {};
  weights_loaded_ = false;
}

void GenerationEngine::set_kv_scales(const std::vector<QkvScales>& scales) {
  kv_.set_scales(scales, options_.kv_dtype == DType::kE4M3 && options_.fp8_attention);
}

void GenerationEngine::linears_forward(std::initializer_list<LinearCall> calls, const float* x, int64_t R, bool round) {
  const int64_t K = calls.begin()->lin->K;
  bool any_bias = false;
  for (const LinearCall& c : calls) {
    FP8RL_CHECK(c.lin->K == K, "linears_forward: linears of K {} and {} cannot share x", K, c.lin->K);
    any_bias |= !c.lin->bias.empty();
  }
  linears_products(calls, x, R, round && !any_bias);
  // Biases (Qwen2's q, k, v) before the one rounding, as the trainer's Linear adds them.
  if (!any_bias) return;
  for (const LinearCall& c : calls) {
    if (!c.lin->bias.empty()) {
      bias_forward(c.y, c.lin->bias.data(), R, c.lin->N, round);
    } else if (round) {
      round_bf16(c.y, R * c.lin->N);
    }
  }
}

void GenerationEngine::linears_products(std::initializer_list<LinearCall> calls, const float* x, int64_t R,
                                        bool round) {
  const int64_t K = calls.begin()->lin->K;
  const GemmOptions gemm{.isa = Isa::kAuto, .threads = 0, .batch_invariant = true, .round_output_bf16 = round};
  const GemvOptions gemv{
      .isa = Isa::kAuto, .threads = 0, .batch_invariant = options_.batch_invariant, .round_output_bf16 = round};
  std::vector<const LinearCall*> group;
  for (const Precision p : {Precision::kF32, Precision::kBF16, Precision::kFP8}) {
    group.clear();
    for (const LinearCall& c : calls)
      if (c.lin->precision == p) group.push_back(&c);
    if (group.empty()) continue;
    if (p == Precision::kF32) {
      for (const LinearCall* c : group)
        gemm_nt_f32(R, c->lin->N, K, x, K, c->lin->f32.data(), K, c->y, c->lin->N, /*accumulate=*/false, gemm);
      continue;
    }
    const bool use_gemm = R >= gemm_from_rows(p == Precision::kBF16 ? DType::kBF16 : DType::kE4M3);
    // GEMV calls take rows in groups of at most 16: every linear's output from row r0 on.
    auto gemv_targets = [&](int64_t r0) {
      std::vector<GemvTarget> at;
      for (const LinearCall* c : group) at.push_back({&c->lin->packed, c->y + r0 * c->lin->N, c->lin->N});
      return at;
    };
    if (p == Precision::kBF16) {
      std::vector<bf16_t> xh(static_cast<size_t>(R * K));
      bf16_encode_f32(x, xh.data(), R * K);
      if (use_gemm) {
        for (const LinearCall* c : group)
          gemm_nt_bf16(R, c->lin->N, K, xh.data(), K, c->lin->bf16_rows, K, c->y, c->lin->N, /*accumulate=*/false,
                       gemm);
        continue;
      }
      for (int64_t r0 = 0; r0 < R; r0 += kGemvMaxRows) {
        const std::vector<GemvTarget> at = gemv_targets(r0);
        gemv_bf16(at.data(), static_cast<int>(at.size()), std::min(kGemvMaxRows, R - r0), xh.data() + r0 * K, K, gemv);
      }
      continue;
    }
    // W8A8: activations quantized 1x128 per row, exactly as the trainer's FP8 forward does (the
    // rows are independent, so all R at once for the GEMM, 16 at a time for the GEMV).
    const int64_t step = use_gemm ? R : kGemvMaxRows;
    QuantizedTensor xq(ScalingMode::kRows1x128, std::min(step, R), K, policy_.activation_scale_format,
                       /*with_columnwise=*/false);
    for (int64_t r0 = 0; r0 < R; r0 += step) {
      const int64_t m = std::min(step, R - r0);
      xq.reshape(m, K);  // the last group may be shorter; the storage is kept
      quantize_into(TensorView::contiguous(const_cast<float*>(x + r0 * K), DType::kF32, Shape{m, K}), xq);
      if (use_gemm) {
        for (const LinearCall* c : group)
          gemm_nt_fp8(xq.rowwise, *c->lin->fp8_rows, c->y, c->lin->N, /*accumulate=*/false, gemm);
      } else {
        const std::vector<GemvTarget> at = gemv_targets(r0);
        gemv_fp8(at.data(), static_cast<int>(at.size()), xq.rowwise, gemv);
      }
    }
  }
}

void GenerationEngine::forward_rows(const std::vector<Row>& rows, float* logits, const std::vector<int64_t>& logit_rows) {
  FP8RL_CHECK(weights_loaded_, "generate called before update_weights (the refit must load weights first)");
  const int64_t R = static_cast<int64_t>(rows.size());
  const int64_t C = config_.d_model, F = config_.d_ff, Hq = config_.n_heads, Hkv = config_.n_kv_heads;
  const int64_t D = config_.head_dim, QD = config_.q_dim(), KD = config_.kv_dim(), group = Hq / Hkv;
  const bool fp8_kv = options_.kv_dtype == DType::kE4M3;
  const bool fp8_attention = fp8_kv && options_.fp8_attention;

  // The activations live in scratch_, resized (not reallocated) from call to call.
  const auto sized = [R](auto& buf, int64_t width) -> auto& {
    buf.resize(static_cast<size_t>(R * width));
    return buf;
  };
  std::vector<float>&x = sized(scratch_.x, C), &h = sized(scratch_.h, C), &tmp = sized(scratch_.tmp, C);
  std::vector<float>&q = sized(scratch_.q, QD), &k = sized(scratch_.k, KD), &v = sized(scratch_.v, KD);
  std::vector<float>&att = sized(scratch_.att, QD), &rstd = sized(scratch_.rstd, Hq);
  std::vector<float>&g = sized(scratch_.g, F), &u = sized(scratch_.u, F), &s = sized(scratch_.s, F);
  std::vector<float>&qn = scratch_.qn, &kn = scratch_.kn;
  std::vector<int32_t>& positions = sized(scratch_.positions, 1);
  for (int64_t r = 0; r < R; ++r) {
    const Row& row = rows[static_cast<size_t>(r)];
    FP8RL_CHECK(row.token >= 0 && row.token < config_.vocab_size, "token id {} outside the vocabulary of {}", row.token,
                config_.vocab_size);
    const bf16_t* e = embed_ + row.token * C;
    for (int64_t i = 0; i < C; ++i) x[static_cast<size_t>(r * C + i)] = bf16_to_f32(e[i]);
    positions[static_cast<size_t>(r)] = static_cast<int32_t>(row.pos);
  }
  if (config_.qk_norm) qn.resize(q.size()), kn.resize(k.size());
  for (int64_t l = 0; l < config_.n_layers; ++l) {
    EngineLayer& e = layers_[static_cast<size_t>(l)];
    rmsnorm_forward(h.data(), rstd.data(), x.data(), e.attn_norm.data(), R, C, config_.norm_eps,
                    /*round_output_bf16=*/true);
    linears_forward({{&e.lin[kQ], config_.qk_norm ? qn.data() : q.data()},
                     {&e.lin[kK], config_.qk_norm ? kn.data() : k.data()},
                     {&e.lin[kV], v.data()}},
                    h.data(), R, /*round_bf16=*/true);
    if (config_.qk_norm) {
      rmsnorm_forward(q.data(), rstd.data(), qn.data(), e.q_norm.data(), R * Hq, D, config_.norm_eps);
      rmsnorm_forward(k.data(), rstd.data(), kn.data(), e.k_norm.data(), R * Hkv, D, config_.norm_eps);
    }
    // RoPE and the BF16 rounding of q and k, then every row's K and V go into the cache before any
    // row attends (so prefill rows of one sequence see each other causally). Rows are independent.
    kernel_thread_pool().parallel_for(R, [&](int64_t r) {
      const Row& row = rows[static_cast<size_t>(r)];
      float* qr = q.data() + r * QD;
      float* kr = k.data() + r * KD;
      rope_forward(qr, &positions[static_cast<size_t>(r)], 1, Hq, D, rope_);
      rope_forward(kr, &positions[static_cast<size_t>(r)], 1, Hkv, D, rope_);
      round_bf16(qr, QD);
      round_bf16(kr, KD);
      const bool in_prefix = row.pos < row.prefix_len;
      kv_.write(in_prefix ? *row.prefix : *row.own, l, in_prefix ? row.pos : row.pos - row.prefix_len, kr,
                v.data() + r * KD);
    });
    // Attention reads the K/V pages in place, widening (BF16) or decoding (FP8) rows in registers.
    // The layer's scales, or its KV heads' (QkvScales::q_of, k_of, v_of).
    const QkvScales& sc = fp8_kv ? kv_.scales(l) : kUnitScales;
    const DType element = fp8_kv ? DType::kE4M3 : DType::kBF16;
    // One task per row (all its heads): disjoint outputs, the same arithmetic on any thread.
    kernel_thread_pool().parallel_for(R, [&](int64_t r) {
      const Row& row = rows[static_cast<size_t>(r)];
      const int64_t len = row.pos + 1;
      // Positions [0, prefix_len) come from the shared prefix's pages, the rest from the row's own.
      const int64_t from_prefix = row.prefix != nullptr ? std::min(len, row.prefix_len) : 0;
      std::vector<float> probs(static_cast<size_t>(group * len)), qq(static_cast<size_t>(group * D));
      std::vector<AttentionRows> runs;
      for (int64_t g = 0; g < Hkv; ++g) {
        runs.clear();
        if (from_prefix > 0) kv_.append_runs(*row.prefix, l, from_prefix, g * D, runs);
        if (len > from_prefix) kv_.append_runs(*row.own, l, len - from_prefix, g * D, runs);
        const float* qg = q.data() + r * QD + g * group * D;  // the group's query heads, D apart
        const float q_scale = sc.q_of(g), k_scale = sc.k_of(g);  // 1 with a BF16 cache (kUnitScales)
        if (fp8_attention) {
          for (int64_t d = 0; d < group * D; ++d) qq[static_cast<size_t>(d)] = e4m3_to_f32(f32_to_e4m3(qg[d] / q_scale));
          qg = qq.data();
        }
        const float score_scale = attention_score_scale(D, k_scale, fp8_attention ? q_scale : 1.0f);
        attention_group_kv(att.data() + r * QD + g * group * D, D, probs.data(), len, qg, D, group, runs.data(),
                           static_cast<int>(runs.size()), len, D, KD, element, score_scale, fp8_kv ? sc.v_of(g) : 1.0f,
                           policy_.attention == Precision::kBF16);
      }
      round_bf16(att.data() + r * QD, QD);
    });
    linears_forward({{&e.lin[kO], tmp.data()}}, att.data(), R, /*round_bf16=*/true);
    for (int64_t i = 0; i < R * C; ++i) x[static_cast<size_t>(i)] += tmp[static_cast<size_t>(i)];
    round_bf16(x.data(), R * C);
    rmsnorm_forward(h.data(), rstd.data(), x.data(), e.mlp_norm.data(), R, C, config_.norm_eps,
                    /*round_output_bf16=*/true);
    if (e.moe) {
      moe_forward(e, rows, h.data(), tmp.data());
    } else {
      linears_forward({{&e.lin[kGate], g.data()}, {&e.lin[kUp], u.data()}}, h.data(), R, /*round_bf16=*/true);
      swiglu_forward(s.data(), g.data(), u.data(), R * F, /*round_output_bf16=*/true);
      linears_forward({{&e.lin[kDown], tmp.data()}}, s.data(), R, /*round_bf16=*/true);
    }
    for (int64_t i = 0; i < R * C; ++i) x[static_cast<size_t>(i)] += tmp[static_cast<size_t>(i)];
    round_bf16(x.data(), R * C);
  }
  if (logits == nullptr) return;
  // The head on the wanted rows only (rows are independent: the same bits as on all of them).
  int64_t L = R;
  if (!logit_rows.empty()) {
    L = static_cast<int64_t>(logit_rows.size());
    for (int64_t i = 0; i < L; ++i) {
      const int64_t r = logit_rows[static_cast<size_t>(i)];
      FP8RL_CHECK(r >= i && r < R && (i == 0 || r > logit_rows[static_cast<size_t>(i) - 1]),
                  "forward_rows: logit rows must be increasing row indices below {} (row {} at {})", R, r, i);
      if (r != i) std::memcpy(x.data() + i * C, x.data() + r * C, sizeof(float) * static_cast<size_t>(C));
    }
  }
  rmsnorm_forward(h.data(), rstd.data(), x.data(), final_norm_.data(), L, C, config_.norm_eps);
  if (lm_head_.precision != Precision::kF32) round_bf16(h.data(), L * C);  // the head reads BF16 inputs
  linears_forward({{&lm_head_, logits}}, h.data(), L, /*round_bf16=*/false);
}

void GenerationEngine::moe_forward(const EngineLayer& e, const std::vector<Row>& rows, const float* h, float* y) {
  const int64_t R = static_cast<int64_t>(rows.size());
  const int64_t C = config_.d_model, F = config_.d_expert, E = config_.num_experts, k = config_.experts_per_token;
  Scratch& m = scratch_;
  m.moe_logits.resize(static_cast<size_t>(R * E));
  linears_forward({{&e.router, m.moe_logits.data()}}, h, R, /*round_bf16=*/false);
  route_tokens(m.moe_logits.data(), R, E, k, config_.norm_topk_prob, m.routing);
  group_by_expert(m.routing, m.groups);
  for (int64_t r = 0; r < R; ++r)
    if (uint16_t* dst = rows[static_cast<size_t>(r)].routing; dst != nullptr)
      for (int64_t j = 0; j < k; ++j)
        dst[e.moe_index * k + j] = static_cast<uint16_t>(m.routing.expert[static_cast<size_t>(r * k + j)]);
  for (auto [buf, width] : {std::pair{&m.moe_x, C}, std::pair{&m.moe_g, F}, std::pair{&m.moe_u, F},
                            std::pair{&m.moe_s, F}, std::pair{&m.moe_out, C}})
    buf->resize(static_cast<size_t>(R * k * width));
  gather_expert_inputs(m.moe_x.data(), h, m.groups, C);
  for (int64_t x = 0; x < E; ++x) {
    const int64_t r0 = m.groups.begin[static_cast<size_t>(x)], M = m.groups.begin[static_cast<size_t>(x + 1)] - r0;
    if (M == 0) continue;
    const size_t i = static_cast<size_t>(x);
    float *g = m.moe_g.data() + r0 * F, *u = m.moe_u.data() + r0 * F, *s = m.moe_s.data() + r0 * F;
    linears_forward({{&e.expert_gate[i], g}, {&e.expert_up[i], u}}, m.moe_x.data() + r0 * C, M, /*round_bf16=*/true);
    swiglu_forward(s, g, u, M * F, /*round_output_bf16=*/true);
    linears_forward({{&e.expert_down[i], m.moe_out.data() + r0 * C}}, s, M, /*round_bf16=*/true);
  }
  combine_expert_outputs(y, m.moe_out.data(), m.routing, m.groups, C);
  round_bf16(y, R * C);
}

std::vector<float> GenerationEngine::prompt_logits(const std::vector<int32_t>& tokens, int64_t first_row) {
  const int64_t n = static_cast<int64_t>(tokens.size());
  FP8RL_CHECK(n > 0 && n <= config_.max_seq_len, "prompt_logits: {} tokens (max_seq_len {})", n, config_.max_seq_len);
  FP8RL_CHECK(first_row >= 0 && first_row < n, "prompt_logits: first row {} of {}", first_row, n);
  if (options_.kv_dtype == DType::kE4M3)
    FP8RL_CHECK(kv_.scales_set(), "prompt_logits: the FP8 KV cache has no Q/K/V scales for the current weights");
  KvBlockList seq;
  FP8RL_REQUIRE(kv_.reserve(seq, n), "the KV cache ({} tokens) cannot hold a sequence of {} tokens: raise "
                                     "generation.kv_cache_bytes", kv_.capacity_tokens(), n);
  std::vector<Row> rows;
  for (int64_t i = 0; i < n; ++i) rows.push_back({nullptr, 0, &seq, i, tokens[static_cast<size_t>(i)]});
  std::vector<int64_t> logit_rows;
  for (int64_t i = first_row; i < n; ++i) logit_rows.push_back(i);
  std::vector<float> logits(static_cast<size_t>((n - first_row) * config_.vocab_size));
  try {
    forward_rows(rows, logits.data(), logit_rows);
  } catch (...) {
    kv_.release(seq);
    throw;
  }
  kv_.release(seq);
  return logits;
}

std::vector<GeneratedSequence> GenerationEngine::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                          int64_t samples_per_prompt, const GenerateOptions& opt) {
  const int64_t P = static_cast<int64_t>(prompts.size()), G = samples_per_prompt, V = config_.vocab_size;
  FP8RL_CHECK(G >= 1 && opt.max_new_tokens >= 1, "generate: samples_per_prompt and max_new_tokens must be >= 1");
  if (options_.kv_dtype == DType::kE4M3)
    FP8RL_CHECK(kv_.scales_set(), "generate: the FP8 KV cache has no Q/K/V scales for the current weights "
                                  "(set_kv_scales must follow every update_weights)");
  for (int64_t p = 0; p < P; ++p) {
    const int64_t len = static_cast<int64_t>(prompts[static_cast<size_t>(p)].size());
    FP8RL_CHECK(len >= 1, "generate: prompt {} is empty (it needs at least bos)", p);
    FP8RL_CHECK(len + opt.max_new_tokens <= config_.max_seq_len,
                "generate: prompt {} ({} tokens) + max_new_tokens {} exceeds max_seq_len {}", p, len,
                opt.max_new_tokens, config_.max_seq_len);
  }
  stats_ = {};
  // MoE models record each row's experts: per position, [MoE layers, k].
  const int64_t per_position = num_moe_layers_ * config_.experts_per_token;
  struct Prefix {
    KvBlockList blocks;
    std::vector<uint16_t> routing;  // the prompt's positions
    std::vector<float> last_logits;  // [V] logits after the prompt's last token
    int64_t unfinished = 0;
    bool prefilled = false;
  };
  struct Sample {
    int64_t p = 0, g = 0;
    KvBlockList own;
    std::vector<float> first_logits;  // without prefix sharing: logits after its own prefill
    GeneratedSequence out;
    bool needs_prefill = false;
    std::vector<uint16_t> routing;  // every position's (prompt and response)
    // Multi-turn: waiting for the handler's answer; ended by it; where the current turn began;
    // the tokens to prefill before the next sampled one (its last sampled token and an observation).
    bool waiting = false, done = false;
    size_t turn_begin = 0;
    int64_t prefill_from = -1;  // index into out.tokens (-1: nothing to prefill)
  };
  std::vector<Prefix> prefixes(static_cast<size_t>(P));
  for (Prefix& pre : prefixes) pre.unfinished = G;
  std::deque<std::pair<int64_t, int64_t>> pending;
  std::vector<uint8_t> waited(static_cast<size_t>(P * G), 0);  // waited for KV pages at least once
  for (int64_t p = 0; p < P; ++p)
    for (int64_t g = 0; g < G; ++g) pending.emplace_back(p, g);
  std::vector<GeneratedSequence> results(static_cast<size_t>(P * G));
  std::vector<std::unique_ptr<Sample>> active;
  std::vector<float> scratch(static_cast<size_t>(2 * V));  // sample_token's

  auto plen = [&](int64_t p) { return static_cast<int64_t>(prompts[static_cast<size_t>(p)].size()); };
  auto finished = [&](const Sample& s) {
    return s.done || (opt.turns == nullptr && !s.out.tokens.empty() && s.out.tokens.back() == opt.eos) ||
           static_cast<int64_t>(s.out.tokens.size()) >= opt.max_new_tokens;
  };
  auto sample_next = [&](Sample& s, const float* logits) {
    const uint64_t stream = opt.first_sequence_index + static_cast<uint64_t>(s.p * G + s.g);
    const SampledToken t = sample_token(logits, V, opt.sampling, stream, s.out.tokens.size(), scratch.data());
    s.out.tokens.push_back(t.token);
    s.out.logprobs.push_back(t.logprob);
    if (t.token == opt.eos) s.out.finish = FinishReason::kStop;
    if (opt.turns == nullptr) return;
    s.out.observation.push_back(0);
    // A turn that ends with room for more goes to the handler; the budget's end ends the sample.
    if (finished(s)) return;
    if (t.token == opt.eos || opt.turns->ends_turn(s.p * G + s.g, s.out.tokens, s.turn_begin)) {
      s.waiting = true;
      ++s.out.turns;
      opt.turns->submit(s.p * G + s.g, s.out.tokens);
    }
  };
  // The handler's answer for a waiting sample: the end, or an observation to prefill (with the
  // sample's last token, which no forward has read yet). One that leaves no room for the model's
  // next token ends the sample instead.
  auto take_answer = [&](Sample& s, TurnHandler::Answer& a) {
    s.waiting = false;
    s.out.finish = FinishReason::kStop;
    const size_t room = static_cast<size_t>(opt.max_new_tokens) - s.out.tokens.size();
    if (a.done || a.observation.size() >= room) {
      if (!a.done) s.out.finish = FinishReason::kLength;
      s.done = true;
      return;
    }
    if (a.observation.empty()) return;  // the model goes on where it stopped
    s.prefill_from = static_cast<int64_t>(s.out.tokens.size()) - 1;
    s.out.tokens.insert(s.out.tokens.end(), a.observation.begin(), a.observation.end());
    s.out.logprobs.insert(s.out.logprobs.end(), a.observation.size(), 0.0f);
    s.out.observation.insert(s.out.observation.end(), a.observation.size(), 1);
    s.turn_begin = s.out.tokens.size();
    stats_.observation_tokens += static_cast<int64_t>(a.observation.size());
  };
  bool idle = false;  // the last pass decoded nothing: every running sample waits for an answer

  while (!pending.empty() || !active.empty()) {
    if (opt.turns != nullptr && std::any_of(active.begin(), active.end(), [](const auto& s) { return s->waiting; })) {
      const Timer wait_timer;
      std::vector<TurnHandler::Answer> answers = opt.turns->poll(/*wait=*/idle);
      if (idle) stats_.turn_wait_seconds += wait_timer.seconds();
      for (TurnHandler::Answer& a : answers) {
        const auto it = std::find_if(active.begin(), active.end(),
                                     [&](const auto& s) { return s->waiting && s->p * G + s->g == a.sequence; });
        FP8RL_CHECK(it != active.end(), "generate: an answer for sequence {}, which is not waiting for one", a.sequence);
        take_answer(**it, a);
      }
    }
    // Admission: start waiting samples while there is room (continuous batching).
    std::vector<Row> prefill;
    std::vector<std::pair<Sample*, int64_t>> prefill_last_rows;  // sample (or nullptr) -> row index
    std::vector<std::pair<int64_t, int64_t>> prefix_last_rows;   // prompt -> row index
    std::vector<std::pair<Sample*, int64_t>> observation_last_rows;  // sample -> its observation's last row
    std::vector<Sample*> admitted;
    while (!pending.empty() && static_cast<int64_t>(active.size()) < options_.max_num_seqs) {
      const auto [p, g] = pending.front();
      auto s = std::make_unique<Sample>();
      s->p = p, s->g = g;
      s->out.prompt_index = p, s->out.sample_index = g;
      Prefix& pre = prefixes[static_cast<size_t>(p)];
      const bool new_prefix = opt.share_prefix && !pre.prefilled && pre.blocks.pages.empty();
      s->routing.resize(static_cast<size_t>((plen(p) + opt.max_new_tokens) * per_position));
      const int64_t own_tokens = (opt.share_prefix ? 0 : plen(p)) + opt.max_new_tokens;
      const int64_t prefix_pages = new_prefix ? kv_pages_for(plen(p)) : 0;
      const int64_t own_pages = kv_pages_for(own_tokens);
      if (prefix_pages + own_pages > kv_.free_pages()) {
        FP8RL_REQUIRE(
            !active.empty() || !prefill.empty(),
            "generate: the KV cache ({} tokens, {} bytes each) cannot hold one sequence of {} prompt + {} new "
            "tokens: raise generation.kv_cache_bytes",
            kv_.capacity_tokens(), kv_.bytes_per_token(), plen(p), opt.max_new_tokens);
        // It waits, whole, until running sequences finish and free their pages, and so do the
        // samples queued behind it that a decode slot was free for; each is counted once.
        const size_t free_slots = static_cast<size_t>(options_.max_num_seqs) - active.size();
        for (size_t i = 0; i < std::min(pending.size(), free_slots); ++i) {
          uint8_t& w = waited[static_cast<size_t>(pending[i].first * G + pending[i].second)];
          stats_.kv_waited += w == 0;
          w = 1;
        }
        break;
      }
      if (new_prefix) {
        kv_.reserve(pre.blocks, plen(p));
        pre.routing.resize(static_cast<size_t>(plen(p) * per_position));
        for (int64_t i = 0; i < plen(p); ++i)
          prefill.push_back({nullptr, 0, &pre.blocks, i, prompts[static_cast<size_t>(p)][static_cast<size_t>(i)],
                             per_position > 0 ? pre.routing.data() + i * per_position : nullptr});
        prefix_last_rows.emplace_back(p, static_cast<int64_t>(prefill.size()) - 1);
      }
      kv_.reserve(s->own, own_tokens);
      if (!opt.share_prefix) {
        for (int64_t i = 0; i < plen(p); ++i)
          prefill.push_back({nullptr, 0, &s->own, i, prompts[static_cast<size_t>(p)][static_cast<size_t>(i)],
                             per_position > 0 ? s->routing.data() + i * per_position : nullptr});
        prefill_last_rows.emplace_back(s.get(), static_cast<int64_t>(prefill.size()) - 1);
      }
      admitted.push_back(s.get());
      active.push_back(std::move(s));
      pending.pop_front();
    }
    stats_.peak_active = std::max<int64_t>(stats_.peak_active, static_cast<int64_t>(active.size()));
    // Observations join the prefill: the sample's last sampled token, then the observation's.
    for (auto& s : active) {
      if (s->prefill_from < 0) continue;
      const int64_t prefix_len = opt.share_prefix ? plen(s->p) : 0;
      for (size_t i = static_cast<size_t>(s->prefill_from); i < s->out.tokens.size(); ++i) {
        const int64_t pos = plen(s->p) + static_cast<int64_t>(i);
        prefill.push_back({opt.share_prefix ? &prefixes[static_cast<size_t>(s->p)].blocks : nullptr, prefix_len, &s->own,
                           pos, s->out.tokens[i], per_position > 0 ? s->routing.data() + pos * per_position : nullptr});
      }
      observation_last_rows.emplace_back(s.get(), static_cast<int64_t>(prefill.size()) - 1);
      s->prefill_from = -1;
    }
    if (!prefill.empty()) {
      const Timer prefill_timer;
      // Logits of the prompts' last rows only (a prompt's other rows only fill the cache).
      std::vector<int64_t> last_rows;
      for (const auto& [p, r] : prefix_last_rows) last_rows.push_back(r);
      for (const auto& [s, r] : prefill_last_rows) last_rows.push_back(r);
      for (const auto& [s, r] : observation_last_rows) last_rows.push_back(r);
      std::sort(last_rows.begin(), last_rows.end());
      std::vector<float> logits(last_rows.size() * static_cast<size_t>(V));
      forward_rows(prefill, logits.data(), last_rows);
      stats_.prefill_seconds += prefill_timer.seconds();
      stats_.prefill_tokens += static_cast<int64_t>(prefill.size());
      auto logits_of = [&](int64_t r) {
        const auto at = std::lower_bound(last_rows.begin(), last_rows.end(), r) - last_rows.begin();
        return logits.begin() + at * V;
      };
      for (const auto& [p, r] : prefix_last_rows) {
        Prefix& pre = prefixes[static_cast<size_t>(p)];
        pre.last_logits.assign(logits_of(r), logits_of(r) + V);
        pre.prefilled = true;
      }
      for (const auto& [s, r] : prefill_last_rows) s->first_logits.assign(logits_of(r), logits_of(r) + V);
      for (const auto& [s, r] : observation_last_rows) sample_next(*s, &*logits_of(r));
    }
    // A newly admitted sample draws its first token from the logits after the prompt.
    for (Sample* s : admitted)
      sample_next(*s, opt.share_prefix ? prefixes[static_cast<size_t>(s->p)].last_logits.data() : s->first_logits.data());

    // One decode step for every running sample.
    std::vector<Row> rows;
    std::vector<Sample*> stepping;
    for (auto& s : active) {
      if (finished(*s) || s->waiting) continue;
      const int64_t prefix_len = opt.share_prefix ? plen(s->p) : 0;
      const int64_t pos = plen(s->p) + static_cast<int64_t>(s->out.tokens.size()) - 1;
      rows.push_back({opt.share_prefix ? &prefixes[static_cast<size_t>(s->p)].blocks : nullptr, prefix_len, &s->own, pos,
                      s->out.tokens.back(), per_position > 0 ? s->routing.data() + pos * per_position : nullptr});
      stepping.push_back(s.get());
    }
    if (!rows.empty()) {
      const Timer decode_timer;
      std::vector<float> logits(rows.size() * static_cast<size_t>(V));
      forward_rows(rows, logits.data());
      stats_.decode_tokens += static_cast<int64_t>(rows.size());
      ++stats_.decode_steps;
      for (size_t i = 0; i < stepping.size(); ++i) sample_next(*stepping[i], logits.data() + i * static_cast<size_t>(V));
      stats_.decode_seconds += decode_timer.seconds();
    }
    idle = prefill.empty() && rows.empty();
    // Retire finished samples; their pages (and a prompt's, after its last sample) are reused.
    for (auto it = active.begin(); it != active.end();) {
      Sample& s = **it;
      if (!finished(s)) {
        ++it;
        continue;
      }
      kv_.release(s.own);
      Prefix& pre = prefixes[static_cast<size_t>(s.p)];
      if (per_position > 0) {  // the prompt's positions (from the shared prefix), then the response's
        if (opt.share_prefix) std::copy(pre.routing.begin(), pre.routing.end(), s.routing.begin());
        const int64_t read = plen(s.p) + static_cast<int64_t>(s.out.tokens.size()) - 1;
        s.routing.resize(static_cast<size_t>(read * per_position));
        s.out.routing = std::move(s.routing);
      }
      if (--pre.unfinished == 0) kv_.release(pre.blocks);
      results[static_cast<size_t>(s.p * G + s.g)] = std::move(s.out);
      it = active.erase(it);
    }
  }
  return results;
}

}  // namespace fp8rl
