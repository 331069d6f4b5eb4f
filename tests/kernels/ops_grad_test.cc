// Finite-difference checks of every layer's backward (FP32), and properties of RoPE.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <vector>

#include "core/rng.h"
#include "kernels/attention/attention.h"
#include "kernels/attention/attention_row.h"
#include "kernels/elementwise/logprob.h"
#include "kernels/elementwise/rmsnorm.h"
#include "kernels/elementwise/rope.h"
#include "numerics/bf16.h"
#include "kernels/elementwise/swiglu.h"
#include "tests/grad_check.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using testing::expect_gradient_matches;

std::vector<float> randn(int64_t n, uint64_t stream, float stddev = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  fill_normal(v.data(), n, 0.0f, stddev, 77, stream);
  return v;
}

// The attention probabilities P [B, Hq, T, T] attention_forward computes (and keeps nowhere):
// the row function of every query row, zeros past the causal length.
std::vector<float> attention_probs(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, const AttentionShape& s, bool bf16) {
  const int64_t ldq = s.Hq * s.D, ldkv = s.Hkv * s.D, group = s.Hq / s.Hkv;
  std::vector<float> probs(static_cast<size_t>(s.B * s.Hq * s.T * s.T), 0.0f), out(static_cast<size_t>(s.D));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h)
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t g = h / group;
        const AttentionRows run{k.data() + b * s.T * ldkv + g * s.D, v.data() + b * s.T * ldkv + g * s.D, t + 1};
        attention_row_kv(out.data(), probs.data() + ((b * s.Hq + h) * s.T + t) * s.T, q.data() + (b * s.T + t) * ldq + h * s.D,
                         &run, 1, t + 1, s.D, ldkv, DType::kF32, 1.0f / std::sqrt(static_cast<float>(s.D)), 1.0f,
                         bf16);
      }
  return probs;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

TEST(OpsGrad, RmsNorm) {
  const int64_t rows = 3, dim = 10;
  auto x = randn(rows * dim, 1), w = randn(dim, 2), r = randn(rows * dim, 3);
  std::vector<float> y(x.size()), rstd(rows), dx(x.size()), dw(dim, 0.0f);
  auto loss = [&] {
    rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), rows, dim, 1e-6f);
    return dot(y, r);
  };
  loss();
  rmsnorm_backward(dx.data(), dw.data(), r.data(), x.data(), w.data(), rstd.data(), rows, dim, false);
  expect_gradient_matches("rmsnorm dx", x.data(), rows * dim, dx.data(), loss, 1e-2, 1e-3, 1e-2);
  expect_gradient_matches("rmsnorm dw", w.data(), dim, dw.data(), loss, 1e-2, 1e-3, 1e-2);
}

TEST(OpsGrad, SwiGlu) {
  const int64_t n = 40;
  auto g = randn(n, 1, 2.0f), u = randn(n, 2), r = randn(n, 3);
  std::vector<float> s(n), dg(n), du(n);
  auto loss = [&] {
    swiglu_forward(s.data(), g.data(), u.data(), n);
    return dot(s, r);
  };
  swiglu_backward(dg.data(), du.data(), r.data(), g.data(), u.data(), n);
  expect_gradient_matches("swiglu dg", g.data(), n, dg.data(), loss, 1e-2, 1e-3, 1e-2);
  expect_gradient_matches("swiglu du", u.data(), n, du.data(), loss, 1e-2, 1e-3, 1e-2);
}

TEST(OpsGrad, SwiGluGivesTheSameBitsOnEveryIsa) {
  const int64_t n = 5000;  // several tasks and a tail
  auto g = randn(n, 4, 8.0f), u = randn(n, 5), ds = randn(n, 6);
  g[0] = 120.0f, g[1] = -120.0f, g[2] = 0.0f;  // sigmoid saturating to 1 and to 0
  std::vector<float> s0(n), dg0(n), du0(n);
  swiglu_forward(s0.data(), g.data(), u.data(), n, false, Isa::kPortable);
  swiglu_backward(dg0.data(), du0.data(), ds.data(), g.data(), u.data(), n, Isa::kPortable);
  for (Isa isa : testing::available_isas()) {
    std::vector<float> s(n), dg(n), du(n);
    swiglu_forward(s.data(), g.data(), u.data(), n, false, isa);
    swiglu_backward(dg.data(), du.data(), ds.data(), g.data(), u.data(), n, isa);
    for (int64_t i = 0; i < n; ++i) {
      const size_t k = static_cast<size_t>(i);
      ASSERT_EQ(std::bit_cast<uint32_t>(s[k]), std::bit_cast<uint32_t>(s0[k])) << isa_name(isa) << " s[" << i << "]";
      ASSERT_EQ(std::bit_cast<uint32_t>(dg[k]), std::bit_cast<uint32_t>(dg0[k])) << isa_name(isa) << " dg[" << i << "]";
      ASSERT_EQ(std::bit_cast<uint32_t>(du[k]), std::bit_cast<uint32_t>(du0[k])) << isa_name(isa) << " du[" << i << "]";
    }
  }
}

// The backward skips the zero upper triangle in blocks of 64 rows; at T = 150 (three blocks,
// the last partial) it must still equal the full products, computed here in double from the same
// probabilities. With BF16 attention (q, k, v, dout BF16 values, P rounded in the forward) the
// reference rounds dS to BF16 as the kernel does; the kernel's FP32 dS can round the other way
// where it sits within an FP32 error of a rounding boundary, so the bound is one BF16 step
// (2^-8) of the largest value rather than the FP32 path's 1e-4.
class AttentionBackwardBlocks : public ::testing::TestWithParam<bool> {};

TEST_P(AttentionBackwardBlocks, MatchTheFullProductsInDouble) {
  const bool bf16 = GetParam();
  const AttentionShape s{2, 150, 4, 2, 16};
  const int64_t ldq = s.Hq * s.D, ldkv = s.Hkv * s.D, group = s.Hq / s.Hkv;
  const int64_t nq = s.B * s.T * ldq, nkv = s.B * s.T * ldkv;
  auto q = randn(nq, 1), k = randn(nkv, 2), v = randn(nkv, 3), dout = randn(nq, 4);
  if (bf16)
    for (auto* x : {&q, &k, &v, &dout})
      for (float& e : *x) e = bf16_to_f32(f32_to_bf16(e));
  std::vector<float> o(nq), dq(nq), dk(nkv), dv(nkv);
  attention_forward(o.data(), q.data(), k.data(), v.data(), s, bf16);
  const std::vector<float> probs = attention_probs(q, k, v, s, bf16);
  if (bf16) {
    for (float p : probs) ASSERT_EQ(p, bf16_to_f32(f32_to_bf16(p))) << "P is rounded to BF16 in the forward";
  }
  // The backward recomputes P in blocks of 64 query rows (T = 150: three blocks, the last partial).
  attention_backward(dq.data(), dk.data(), dv.data(), dout.data(), q.data(), k.data(), v.data(), s, bf16);
  const double scale = 1.0 / std::sqrt(static_cast<double>(s.D));
  std::vector<double> rq(nq, 0.0), rk(nkv, 0.0), rv(nkv, 0.0), ds(static_cast<size_t>(s.T * s.T));
  for (int64_t b = 0; b < s.B; ++b)
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t g = h / group;
      const float* p = probs.data() + (b * s.Hq + h) * s.T * s.T;
      auto qa = [&](int64_t t, int64_t d) { return static_cast<size_t>((b * s.T + t) * ldq + h * s.D + d); };
      auto ka = [&](int64_t t, int64_t d) { return static_cast<size_t>((b * s.T + t) * ldkv + g * s.D + d); };
      for (int64_t t = 0; t < s.T; ++t) {
        double dot = 0.0;
        for (int64_t j = 0; j <= t; ++j) {
          double dp = 0.0;
          for (int64_t d = 0; d < s.D; ++d) dp += static_cast<double>(dout[qa(t, d)]) * v[ka(j, d)];
          ds[static_cast<size_t>(t * s.T + j)] = dp;
          dot += p[t * s.T + j] * dp;
        }
        for (int64_t j = 0; j <= t; ++j) {
          double& x = ds[static_cast<size_t>(t * s.T + j)];
          x = p[t * s.T + j] * (x - dot) * scale;
          if (bf16) x = bf16_to_f32(f32_to_bf16(static_cast<float>(x)));
          for (int64_t d = 0; d < s.D; ++d) {
            rv[ka(j, d)] += p[t * s.T + j] * static_cast<double>(dout[qa(t, d)]);
            rq[qa(t, d)] += x * k[ka(j, d)];
            rk[ka(j, d)] += x * q[qa(t, d)];
          }
        }
      }
    }
  auto expect_close = [&](const char* what, const std::vector<float>& got, const std::vector<double>& want) {
    double worst = 0.0, norm = 0.0;
    for (size_t i = 0; i < got.size(); ++i) {
      worst = std::max(worst, std::fabs(got[i] - want[i]));
      norm = std::max(norm, std::fabs(want[i]));
    }
    EXPECT_LE(worst, (bf16 ? 0x1p-8 : 1e-4) * norm) << what << ": worst |difference| " << worst << " for max |value| "
                                                     << norm;
  };
  expect_close("dq", dq, rq);
  expect_close("dk", dk, rk);
  expect_close("dv", dv, rv);
}

INSTANTIATE_TEST_SUITE_P(Precisions, AttentionBackwardBlocks, ::testing::Values(false, true),
                         [](const auto& info) { return std::string(info.param ? "bf16" : "fp32"); });

TEST(OpsGrad, RopeBackwardIsTheAdjointAndRotationsKeepNorms) {
  const int64_t rows = 5, heads = 3, dim = 8;
  const RopeTable table = rope_table(dim, 16, 10000.0, nullptr);
  std::vector<int32_t> pos = {0, 3, 7, 15, 1};
  auto x = randn(rows * heads * dim, 1), y = randn(rows * heads * dim, 2);
  auto rx = x, ry = y;
  rope_forward(rx.data(), pos.data(), rows, heads, dim, table);
  rope_backward(ry.data(), pos.data(), rows, heads, dim, table);
  EXPECT_NEAR(dot(rx, y), dot(x, ry), 1e-4);          // <R x, y> == <x, R^T y>
  EXPECT_NEAR(dot(rx, rx), dot(x, x), 1e-4 * dot(x, x));
  // Position 0 is the identity.
  for (int64_t i = 0; i < heads * dim; ++i) EXPECT_EQ(rx[static_cast<size_t>(i)], x[static_cast<size_t>(i)]);
}

TEST(OpsGrad, RopeLlama3ScalingKeepsHighFrequenciesAndSlowsLowOnes) {
  RopeScaling s;  // factor 8, low 1, high 4, original 8192
  const RopeTable plain = rope_table(128, 2, 500000.0, nullptr);
  const RopeTable scaled = rope_table(128, 2, 500000.0, &s);
  // At position 1 the angle is the frequency itself: the highest frequency is unchanged, the
  // lowest is divided by the factor.
  const size_t highest = 64 + 0, lowest = 64 + 63;  // [position 1, pair i] in a [2, 64] table
  EXPECT_EQ(plain.sin[highest], scaled.sin[highest]);
  const double f_low = std::asin(static_cast<double>(plain.sin[lowest]));
  const double f_low_scaled = std::asin(static_cast<double>(scaled.sin[lowest]));
  EXPECT_NEAR(f_low_scaled, f_low / 8.0, 1e-9);
}

TEST(OpsGrad, Attention) {
  const AttentionShape s{2, 5, 4, 2, 4};
  const int64_t nq = s.B * s.T * s.Hq * s.D, nkv = s.B * s.T * s.Hkv * s.D;
  auto q = randn(nq, 1), k = randn(nkv, 2), v = randn(nkv, 3), r = randn(nq, 4);
  std::vector<float> o(nq), dq(nq), dk(nkv), dv(nkv);
  auto loss = [&] {
    attention_forward(o.data(), q.data(), k.data(), v.data(), s);
    return dot(o, r);
  };
  loss();
  attention_backward(dq.data(), dk.data(), dv.data(), r.data(), q.data(), k.data(), v.data(), s);
  expect_gradient_matches("attention dq", q.data(), nq, dq.data(), loss, 1e-2, 1e-3, 1e-2);
  expect_gradient_matches("attention dk", k.data(), nkv, dk.data(), loss, 1e-2, 1e-3, 1e-2);
  expect_gradient_matches("attention dv", v.data(), nkv, dv.data(), loss, 1e-2, 1e-3, 1e-2);
  // Causality: the first position's output depends on the first key/value only.
  const std::vector<float> probs = attention_probs(q, k, v, s, false);
  for (int64_t h = 0; h < s.Hq; ++h) EXPECT_EQ(probs[static_cast<size_t>(h * s.T * s.T)], 1.0f);
}

TEST(OpsGrad, TokenLogprobs) {
  const int64_t N = 4, V = 7;
  auto logits = randn(N * V, 1, 2.0f), r = randn(N, 2);
  std::vector<int32_t> targets = {3, -1, 0, 6};
  std::vector<float> lp(N), dlogits(N * V);
  auto loss = [&] {
    token_logprobs_forward(lp.data(), logits.data(), targets.data(), N, V);
    return dot(lp, r);
  };
  loss();
  EXPECT_EQ(lp[1], 0.0f);
  double total = 0;  // probabilities of one row sum to 1
  for (int64_t v = 0; v < V; ++v) total += std::exp(static_cast<double>(logits[static_cast<size_t>(v)]) - logsumexp_row(logits.data(), V));
  EXPECT_NEAR(total, 1.0, 1e-6);
  token_logprobs_backward(dlogits.data(), r.data(), logits.data(), targets.data(), N, V);
  expect_gradient_matches("logprob dlogits", logits.data(), N * V, dlogits.data(), loss, 1e-2, 1e-3, 1e-2);
}

}  // namespace
}  // namespace fp8rl
