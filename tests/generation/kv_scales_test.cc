// Per-head Q/K/V scales of the FP8 KV cache (generation.kv_scale_granularity: head) and KV-cache
// admission: the trainer's per-head amax, the cache's per-head encoding, FP8 attention with a
// KV head's scales against a scalar reference, the engine's per-head plumbing, and sequences
// that wait for pages instead of being truncated.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "generation/engine.h"
#include "model/transformer.h"
#include "numerics/e4m3.h"
#include "rl/refit.h"
#include "tests/generation/engine_fixtures.h"

namespace fp8rl {
namespace {

using testing::kBos;
using testing::kEos;
using testing::kPad;

ModelConfig test_config() { return testing::engine_test_config(false); }
Transformer make_trainer(const ModelConfig& c, Precision linear, uint64_t seed) {
  return testing::make_sharpened_trainer(c, linear, seed, 3.0f);
}
std::vector<std::vector<int32_t>> make_prompts(int n, uint64_t seed) { return testing::make_random_prompts(n, seed); }

TokenBatch batch_of(const std::vector<std::vector<int32_t>>& seqs) {
  int64_t T = 1;
  for (const auto& s : seqs) T = std::max<int64_t>(T, static_cast<int64_t>(s.size()));
  TokenBatch b = TokenBatch::empty(static_cast<int64_t>(seqs.size()), T, kPad);
  for (size_t i = 0; i < seqs.size(); ++i) {
    std::copy(seqs[i].begin(), seqs[i].end(), b.tokens.begin() + static_cast<std::ptrdiff_t>(i * static_cast<size_t>(T)));
    b.lengths[i] = static_cast<int32_t>(seqs[i].size());
  }
  return b;
}

// The per-head amax is each head's own: scaling one KV head's rows of W_v by 2 (exact in BF16)
// doubles that head's v amax and leaves the other's, zeroing one KV head's rows of W_k makes its
// k amax 0; the layer's amax is the maximum over its heads.
TEST(KvScales, PerHeadAmaxBelongsToEachHead) {
  const ModelConfig c = test_config();
  const int64_t D = c.head_dim, C = c.d_model;
  Transformer t = make_trainer(c, Precision::kBF16, 3);
  const TokenBatch batch = batch_of(make_prompts(4, 7));
  const std::vector<Transformer::QkvAmax> before = t.qkv_amax(batch);
  for (const Transformer::QkvAmax& a : before) {
    ASSERT_EQ(a.q_heads.size(), static_cast<size_t>(c.n_heads));
    ASSERT_EQ(a.k_heads.size(), static_cast<size_t>(c.n_kv_heads));
    EXPECT_EQ(a.q, *std::max_element(a.q_heads.begin(), a.q_heads.end()));
    EXPECT_EQ(a.k, *std::max_element(a.k_heads.begin(), a.k_heads.end()));
    EXPECT_EQ(a.v, *std::max_element(a.v_heads.begin(), a.v_heads.end()));
  }
  const int64_t layer = 1;
  const LayerWeights& lw = t.weights().layers[layer];
  float* wv = t.params() + (lw.wv - t.params());
  float* wk = t.params() + (lw.wk - t.params());
  for (int64_t i = 0; i < D * C; ++i) wv[i] *= 2.0f;  // KV head 0's rows of W_v
  std::fill(wk + D * C, wk + 2 * D * C, 0.0f);         // KV head 1's rows of W_k
  t.refresh_weights();
  const std::vector<Transformer::QkvAmax> after = t.qkv_amax(batch);
  EXPECT_EQ(after[layer].v_heads[0], 2.0f * before[layer].v_heads[0]);
  EXPECT_EQ(after[layer].v_heads[1], before[layer].v_heads[1]);
  EXPECT_EQ(after[layer].k_heads[0], before[layer].k_heads[0]);
  EXPECT_EQ(after[layer].k_heads[1], 0.0f);
  EXPECT_TRUE(after[0] == before[0]);  // an earlier layer is untouched
  // A KV head that is zero everywhere cannot be given a per-head scale: the error names it.
  try {
    kv_scales_from_amax(after, KvScaleGranularity::kHead);
    ADD_FAILURE() << "a zero per-head amax was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1, KV head 1"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(kv_scales_from_amax(after, KvScaleGranularity::kLayer));
}

// Q's per-head scale is per KV head: the largest amax of its group's query heads.
TEST(KvScales, PerHeadScalesFromAmax) {
  Transformer::QkvAmax a{8.0f, 4.0f, 2.0f, {1.0f, 8.0f, 3.0f, 2.0f}, {4.0f, 0.5f}, {2.0f, 1.0f}};
  const std::vector<QkvScales> s = kv_scales_from_amax({a}, KvScaleGranularity::kHead);
  const float m = 1.05f / 448.0f;
  EXPECT_EQ(s[0].q, 1.05f * 8.0f / 448.0f);
  ASSERT_EQ(s[0].q_heads.size(), 2u);
  EXPECT_EQ(s[0].q_heads[0], 1.05f * 8.0f / 448.0f);
  EXPECT_EQ(s[0].q_heads[1], 1.05f * 3.0f / 448.0f);
  EXPECT_FLOAT_EQ(s[0].k_heads[1], 0.5f * m);
  EXPECT_FLOAT_EQ(s[0].v_heads[0], 2.0f * m);
  EXPECT_TRUE(kv_scales_from_amax({a}, KvScaleGranularity::kLayer)[0].k_heads.empty());
  EXPECT_EQ(kv_scales_from_amax({a}, KvScaleGranularity::kLayer, 2.0f)[0].k, 2.0f * 4.0f / 448.0f);
}

// The cache stores e4m3(x / scale of the entry's KV head), and refuses per-head scales of the
// wrong count or value, naming the layer and head.
TEST(KvScales, CacheEncodesEachHeadWithItsScale) {
  const int64_t L = 2, H = 2, D = 16;
  KvCache cache(L, H, D, DType::kE4M3, 1 << 16);
  QkvScales s{0.5f, 0.02f, 0.04f, {0.5f, 0.25f}, {0.02f, 0.001f}, {0.04f, 0.003f}};
  cache.set_scales({s, s}, true);
  KvBlockList seq;
  ASSERT_TRUE(cache.reserve(seq, 3));
  std::vector<float> k(static_cast<size_t>(H * D)), v(k.size());
  for (int64_t pos = 0; pos < 3; ++pos) {
    fill_normal(k.data(), H * D, 0.0f, 1.0f, 1, static_cast<uint64_t>(pos));
    fill_normal(v.data(), H * D, 0.0f, 1.0f, 2, static_cast<uint64_t>(pos));
    for (int64_t i = D; i < H * D; ++i) k[static_cast<size_t>(i)] *= 0.05f, v[static_cast<size_t>(i)] *= 0.07f;
    cache.write(seq, 1, pos, k.data(), v.data());
    const uint8_t* kc = cache.k_row(seq, 1, pos);
    const uint8_t* vc = cache.v_row(seq, 1, pos);
    for (int64_t i = 0; i < H * D; ++i) {
      ASSERT_EQ(kc[i], f32_to_e4m3(k[static_cast<size_t>(i)] / s.k_heads[static_cast<size_t>(i / D)])) << pos << " " << i;
      ASSERT_EQ(vc[i], f32_to_e4m3(v[static_cast<size_t>(i)] / s.v_heads[static_cast<size_t>(i / D)])) << pos << " " << i;
    }
  }
  QkvScales short_k = s;
  short_k.k_heads.pop_back();
  EXPECT_THROW(cache.set_scales({s, short_k}, true), Error);
  QkvScales bad = s;
  bad.v_heads[1] = 0.0f;
  try {
    cache.set_scales({s, bad}, true);
    ADD_FAILURE() << "a zero per-head scale was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("layer 1, KV head 1"), std::string::npos) << e.what();
  }
  QkvScales no_q = s;  // without FP8 attention, per-head q scales are not needed
  no_q.q_heads.clear();
  EXPECT_NO_THROW(cache.set_scales({no_q, no_q}, false));
  EXPECT_THROW(cache.set_scales({no_q, no_q}, true), Error);
}

// FP8 attention over one KV head's cached rows with that head's scales, as the engine calls it
// (Q codes of q / q_scale, score scale q_scale * k_scale / sqrt(D), value scale v_scale), against a
// scalar reference in double precision over the same codes.
TEST(KvScales, Fp8AttentionWithAHeadsScalesMatchesAScalarReference) {
  const int64_t H = 2, D = 32, len = 37, group = 2;
  KvCache cache(1, H, D, DType::kE4M3, 1 << 16);
  QkvScales s{0.02f, 0.03f, 0.01f, {0.02f, 0.002f}, {0.03f, 0.0015f}, {0.01f, 0.0007f}};
  cache.set_scales({s}, true);
  KvBlockList seq;
  ASSERT_TRUE(cache.reserve(seq, len));
  std::vector<float> k(static_cast<size_t>(H * D)), v(k.size());
  for (int64_t pos = 0; pos < len; ++pos) {
    fill_normal(k.data(), H * D, 0.0f, 3.0f, 4, static_cast<uint64_t>(pos));
    fill_normal(v.data(), H * D, 0.0f, 1.0f, 5, static_cast<uint64_t>(pos));
    for (int64_t i = D; i < H * D; ++i) k[static_cast<size_t>(i)] *= 0.05f, v[static_cast<size_t>(i)] *= 0.07f;
    cache.write(seq, 0, pos, k.data(), v.data());
  }
  std::vector<float> q(static_cast<size_t>(group * D));
  for (int64_t g = 0; g < H; ++g) {
    fill_normal(q.data(), group * D, 0.0f, g == 0 ? 2.0f : 0.2f, 6, static_cast<uint64_t>(g));
    std::vector<float> qq(q.size());
    for (size_t i = 0; i < q.size(); ++i) qq[i] = e4m3_to_f32(f32_to_e4m3(q[i] / s.q_of(g)));
    std::vector<AttentionRows> runs;
    cache.append_runs(seq, 0, len, g * D, runs);
    std::vector<float> out(static_cast<size_t>(group * D)), probs(static_cast<size_t>(group * len));
    const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(D));
    attention_group_kv(out.data(), D, probs.data(), len, qq.data(), D, group, runs.data(), static_cast<int>(runs.size()),
                       len, D, H * D, DType::kE4M3, s.q_of(g) * s.k_of(g) * softmax_scale, s.v_of(g));
    for (int64_t h = 0; h < group; ++h) {
      std::vector<double> score(static_cast<size_t>(len));
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j < len; ++j) {
        const uint8_t* kc = cache.k_row(seq, 0, j) + g * D;
        double dot = 0;
        for (int64_t d = 0; d < D; ++d) dot += static_cast<double>(qq[static_cast<size_t>(h * D + d)]) * s.q_of(g) * e4m3_to_f32(kc[d]) * s.k_of(g);
        score[static_cast<size_t>(j)] = dot / std::sqrt(static_cast<double>(D));
        mx = std::max(mx, score[static_cast<size_t>(j)]);
      }
      for (double& x : score) sum += (x = std::exp(x - mx));
      for (int64_t d = 0; d < D; ++d) {
        double o = 0;
        for (int64_t j = 0; j < len; ++j)
          o += score[static_cast<size_t>(j)] / sum * e4m3_to_f32(cache.v_row(seq, 0, j)[g * D + d]) * s.v_of(g);
        const float got = out[static_cast<size_t>(h * D + d)];
        EXPECT_NEAR(got, o, 1e-5 * s.v_of(g) * 448.0 + 1e-5 * std::fabs(o)) << "kv head " << g << " head " << h << " d " << d;
      }
    }
  }
}

// Per-head scales that all equal the layer's give the per-layer cache's bits; calibrated per-head
// scales differ from them and stay close to the trainer (the engine reads each KV head's scales).
TEST(KvScales, EngineWithEqualPerHeadScalesGivesTheLayerBits) {
  const ModelConfig c = test_config();
  Transformer t = make_trainer(c, Precision::kFP8, 5);
  const auto prompts = make_prompts(4, 2);
  const std::vector<Transformer::QkvAmax> amax = t.qkv_amax(batch_of(prompts));
  const std::vector<QkvScales> layer = kv_scales_from_amax(amax, KvScaleGranularity::kLayer);
  std::vector<QkvScales> equal = layer;
  for (QkvScales& s : equal) {
    s.q_heads.assign(static_cast<size_t>(c.n_kv_heads), s.q);
    s.k_heads.assign(static_cast<size_t>(c.n_kv_heads), s.k);
    s.v_heads.assign(static_cast<size_t>(c.n_kv_heads), s.v);
  }
  EngineOptions eo;
  eo.kv_dtype = DType::kE4M3;
  GenerationEngine e(c, t.policy(), eo);
  refit_generator_weights(t, e);
  e.set_kv_scales(layer);
  const auto a = e.generate(prompts, 3, testing::sampling_options(10, 4));
  e.set_kv_scales(equal);
  const auto b = e.generate(prompts, 3, testing::sampling_options(10, 4));
  e.set_kv_scales(kv_scales_from_amax(amax, KvScaleGranularity::kHead));
  const auto h = e.generate(prompts, 3, testing::sampling_options(10, 4));
  bool any_difference = false;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].tokens, b[i].tokens) << i;
    EXPECT_EQ(a[i].logprobs, b[i].logprobs) << i;
    any_difference = any_difference || a[i].logprobs != h[i].logprobs;
  }
  EXPECT_TRUE(any_difference) << "per-head scales did not reach the engine";
}

// A budget that holds a few sequences at a time: the others wait for pages, are counted, and run
// whole (every one of max_new_tokens, eos never drawn); the results are those of a large cache.
TEST(KvAdmission, SequencesThatDoNotFitWaitAndAreCounted) {
  const ModelConfig c = test_config();
  Transformer t = make_trainer(c, Precision::kBF16, 8);
  const auto prompts = make_prompts(3, 5);
  const int64_t G = 4, new_tokens = 20;
  EngineOptions big, tiny;
  big.kv_cache_bytes = 1 << 20;
  // 6 pages: a prompt's page and 2 pages of own tokens per sample (20 new tokens) -> at most 2 samples in flight.
  const int64_t page_bytes = 2 * c.n_layers * c.kv_dim() * 2 * kPageTokens;
  tiny.kv_cache_bytes = 6 * page_bytes;
  GenerationEngine e_big(c, t.policy(), big), e_tiny(c, t.policy(), tiny);
  refit_generator_weights(t, e_big);
  refit_generator_weights(t, e_tiny);
  ASSERT_EQ(e_tiny.kv_cache().num_pages(), 6);
  const auto want = e_big.generate(prompts, G, testing::sampling_options(new_tokens, 9, /*eos=*/-1));
  EXPECT_EQ(e_big.last_stats().kv_waited, 0);
  const auto got = e_tiny.generate(prompts, G, testing::sampling_options(new_tokens, 9, /*eos=*/-1));
  EXPECT_LE(e_tiny.last_stats().peak_active, 2);
  EXPECT_EQ(e_tiny.last_stats().kv_waited, 3 * G - 2);  // all but the first two wait
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].tokens.size(), static_cast<size_t>(new_tokens)) << i;
    EXPECT_EQ(got[i].finish, FinishReason::kLength) << i;
    EXPECT_EQ(got[i].tokens, want[i].tokens) << i;
    EXPECT_EQ(got[i].logprobs, want[i].logprobs) << i;
  }
  // A sequence that cannot fit even alone is an error naming the sizes, not a truncation.
  EngineOptions two_pages;
  two_pages.kv_cache_bytes = 2 * page_bytes;
  GenerationEngine e_two(c, t.policy(), two_pages);
  refit_generator_weights(t, e_two);
  EXPECT_THROW(e_two.generate({prompts[0]}, 1, testing::sampling_options(40, 1, -1)), Error);
}

}  // namespace
}  // namespace fp8rl
