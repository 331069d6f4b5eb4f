#include "rl/refit.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "rl/data_parallel.h"

namespace fp8rl {

namespace {
LinearWeightSource source_of(const Linear& lin) {
  LinearWeightSource s;
  s.bias = lin.bias();
  s.f32 = lin.f32_weights();  // the master (a frozen trainer has none but for FP32 layers)
  if (lin.precision() == Precision::kFP8) s.fp8 = &lin.fp8_weights().rowwise;
  if (lin.precision() == Precision::kBF16) s.bf16 = lin.bf16_weights().data();
  return s;
}
}  // namespace

GeneratorWeightSource generator_weight_source(const Transformer& trainer) {
  const WeightPointers& w = trainer.weights();
  GeneratorWeightSource src;
  src.embed = w.embed;
  src.embed_bf16 = trainer.embedding_bf16();
  src.final_norm = w.final_norm;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& lw = w.layers[l];
    LayerWeightSource ls;
    ls.attn_norm = lw.attn_norm;
    ls.mlp_norm = lw.mlp_norm;
    ls.q_norm = lw.q_norm;
    ls.k_norm = lw.k_norm;
    // Each projection by its role (arch/spec.h), whatever order the trainer keeps them in.
    for (const TensorSpec& t : layer_linears(trainer.config(), static_cast<int64_t>(l))) {
      const LinearWeightSource s = source_of(trainer.linear(t.role, t.layer, t.expert));
      switch (t.role) {
        case TensorRole::kQ: ls.q = s; break;
        case TensorRole::kK: ls.k = s; break;
        case TensorRole::kV: ls.v = s; break;
        case TensorRole::kO: ls.o = s; break;
        case TensorRole::kGate: ls.gate = s; break;
        case TensorRole::kUp: ls.up = s; break;
        case TensorRole::kDown: ls.down = s; break;
        case TensorRole::kRouter: ls.router = s; break;
        case TensorRole::kExpertGate: ls.expert_gate.push_back(s); break;
        case TensorRole::kExpertUp: ls.expert_up.push_back(s); break;
        case TensorRole::kExpertDown: ls.expert_down.push_back(s); break;
        default: FP8RL_CHECK(false, "refit: '{}' is not a layer projection", t.name);
      }
    }
    src.layers.push_back(ls);
  }
  const TensorSpec head = lm_head_linear(trainer.config());
  src.lm_head = source_of(trainer.linear(head.role, head.layer, head.expert));
  return src;
}

void refit_generator_weights(const Transformer& trainer, GenerationEngine& generator) {
  FP8RL_CHECK(trainer.config().n_layers == generator.config().n_layers &&
                  trainer.config().d_model == generator.config().d_model &&
                  trainer.config().vocab_size == generator.config().vocab_size &&
                  trainer.config().num_experts == generator.config().num_experts,
              "refit: the trainer's and the generator's architectures differ");
  generator.update_weights(generator_weight_source(trainer));
}

std::vector<Transformer::QkvAmax> calibrate_qkv_amax(Transformer& trainer, std::vector<std::vector<int32_t>> sequences,
                                                     int64_t max_batch, int32_t pad, const dist::Communicator& comm) {
  FP8RL_CHECK(max_batch > 0, "KV calibration: batch size {} must be positive", max_batch);
  std::sort(sequences.begin(), sequences.end());
  sequences.erase(std::unique(sequences.begin(), sequences.end()), sequences.end());
  // After sorting, a sequence that is a prefix of others comes right before the first of them.
  std::vector<std::vector<int32_t>> kept;
  for (size_t i = 0; i < sequences.size(); ++i) {
    const std::vector<int32_t>& s = sequences[i];
    const bool prefix_of_next = i + 1 < sequences.size() && s.size() < sequences[i + 1].size() &&
                                std::equal(s.begin(), s.end(), sequences[i + 1].begin());
    if (!s.empty() && !prefix_of_next) kept.push_back(s);
  }
  std::vector<Transformer::QkvAmax> amax(static_cast<size_t>(trainer.config().n_layers));
  auto merge = [](float& m, std::vector<float>& heads, float am, const std::vector<float>& a_heads) {
    m = std::max(m, am);
    heads.resize(a_heads.size(), 0.0f);
    for (size_t h = 0; h < a_heads.size(); ++h) heads[h] = std::max(heads[h], a_heads[h]);
  };
  for (size_t b0 = 0, batch_index = 0; b0 < kept.size(); b0 += static_cast<size_t>(max_batch), ++batch_index) {
    // Batch i runs on rank i % N; a maximum is the same whatever the grouping.
    if (static_cast<int64_t>(batch_index) % comm.size() != comm.rank()) continue;
    const size_t b1 = std::min(kept.size(), b0 + static_cast<size_t>(max_batch));
    int64_t T = 1;
    for (size_t i = b0; i < b1; ++i) T = std::max<int64_t>(T, static_cast<int64_t>(kept[i].size()));
    TokenBatch batch = TokenBatch::empty(static_cast<int64_t>(b1 - b0), T, pad);
    for (size_t i = b0; i < b1; ++i) {
      std::copy(kept[i].begin(), kept[i].end(), batch.tokens.begin() + static_cast<std::ptrdiff_t>((i - b0) * static_cast<size_t>(T)));
      batch.lengths[i - b0] = static_cast<int32_t>(kept[i].size());
    }
    const std::vector<Transformer::QkvAmax> a = trainer.qkv_amax(batch);
    for (size_t l = 0; l < amax.size(); ++l) {
      merge(amax[l].q, amax[l].q_heads, a[l].q, a[l].q_heads);
      merge(amax[l].k, amax[l].k_heads, a[l].k, a[l].k_heads);
      merge(amax[l].v, amax[l].v_heads, a[l].v, a[l].v_heads);
    }
  }
  if (comm.size() == 1 || kept.empty()) return amax;
  // Every rank's maxima: per layer q, k, v and the per-head values (Hq, Hkv, Hkv of them).
  const ModelConfig& c = trainer.config();
  const size_t per_layer = 3 + static_cast<size_t>(c.n_heads + 2 * c.n_kv_heads);
  std::vector<float> mine;
  for (Transformer::QkvAmax& a : amax) {
    a.q_heads.resize(static_cast<size_t>(c.n_heads), 0.0f);  // a rank with no batch has none yet
    a.k_heads.resize(static_cast<size_t>(c.n_kv_heads), 0.0f);
    a.v_heads.resize(static_cast<size_t>(c.n_kv_heads), 0.0f);
    mine.insert(mine.end(), {a.q, a.k, a.v});
    for (const std::vector<float>* h : {&a.q_heads, &a.k_heads, &a.v_heads}) mine.insert(mine.end(), h->begin(), h->end());
  }
  const std::vector<float> all = dist::allgather_values(comm, mine);
  FP8RL_CHECK(all.size() == mine.size() * static_cast<size_t>(comm.size()), "KV calibration: {} values gathered, {} expected",
              all.size(), mine.size() * static_cast<size_t>(comm.size()));
  for (int q = 0; q < comm.size(); ++q)  // a maximum: the order and this rank's own values do not matter
    for (size_t l = 0; l < amax.size(); ++l) {
      const float* x = all.data() + static_cast<size_t>(q) * mine.size() + l * per_layer;
      Transformer::QkvAmax& a = amax[l];
      const std::vector<float> qh(x + 3, x + 3 + c.n_heads), kh(x + 3 + c.n_heads, x + 3 + c.n_heads + c.n_kv_heads),
          vh(x + 3 + c.n_heads + c.n_kv_heads, x + per_layer);
      merge(a.q, a.q_heads, x[0], qh);
      merge(a.k, a.k_heads, x[1], kh);
      merge(a.v, a.v_heads, x[2], vh);
    }
  return amax;
}

const char* kv_scale_granularity_name(KvScaleGranularity g) { return g == KvScaleGranularity::kHead ? "head" : "layer"; }

std::vector<QkvScales> kv_scales_from_amax(const std::vector<Transformer::QkvAmax>& amax,
                                           KvScaleGranularity granularity, float margin) {
  auto ok = [](float x) { return std::isfinite(x) && x > 0.0f; };
  FP8RL_CHECK(ok(margin) && margin >= 1.0f, "KV scale margin {} must be finite and >= 1", margin);
  auto scale = [margin](float a) { return margin * a / 448.0f; };
  std::vector<QkvScales> scales;
  for (size_t l = 0; l < amax.size(); ++l) {
    const Transformer::QkvAmax& a = amax[l];
    FP8RL_CHECK(ok(a.q) && ok(a.k) && ok(a.v),
                "KV calibration of layer {}: amax q {}, k {}, v {} must be finite and > 0 (empty calibration batch?)", l,
                a.q, a.k, a.v);
    QkvScales s{scale(a.q), scale(a.k), scale(a.v), {}, {}, {}};
    if (granularity == KvScaleGranularity::kHead) {
      const size_t hkv = a.k_heads.size(), hq = a.q_heads.size();
      FP8RL_CHECK(hkv > 0 && a.v_heads.size() == hkv && hq % hkv == 0,
                  "KV calibration of layer {}: per-head amax of {} q, {} k, {} v heads (kv_scale_granularity: head "
                  "needs one per head, q heads a multiple of kv heads)", l, hq, hkv, a.v_heads.size());
      const size_t group = hq / hkv;
      for (size_t h = 0; h < hkv; ++h) {
        float qa = 0.0f;
        for (size_t i = h * group; i < (h + 1) * group; ++i) qa = std::max(qa, a.q_heads[i]);
        FP8RL_CHECK(ok(qa) && ok(a.k_heads[h]) && ok(a.v_heads[h]),
                    "KV calibration of layer {}, KV head {}: amax q {}, k {}, v {} must be finite and > 0 (a head "
                    "that is zero on the whole calibration batch?)", l, h, qa, a.k_heads[h], a.v_heads[h]);
        s.q_heads.push_back(scale(qa));
        s.k_heads.push_back(scale(a.k_heads[h]));
        s.v_heads.push_back(scale(a.v_heads[h]));
      }
    }
    scales.push_back(std::move(s));
  }
  return scales;
}

std::vector<Transformer::AttentionE4m3Scales> attention_e4m3_scales(const std::vector<QkvScales>& scales,
                                                                    int64_t n_kv_heads, bool fp8_attention) {
  std::vector<Transformer::AttentionE4m3Scales> out;
  for (const QkvScales& s : scales) {
    Transformer::AttentionE4m3Scales a;
    for (int64_t g = 0; g < n_kv_heads; ++g) {
      if (fp8_attention) a.q.push_back(s.q_of(g));
      a.k.push_back(s.k_of(g));
      a.v.push_back(s.v_of(g));
    }
    out.push_back(std::move(a));
  }
  return out;
}

}  // namespace fp8rl
