#include "model/moe_routing.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "numerics/exp.h"

namespace fp8rl {

void route_tokens(const float* logits, int64_t N, int64_t E, int64_t k, bool norm_topk_prob, MoeRouting& out,
                  const int32_t* replay) {
  FP8RL_CHECK(E > 0 && k > 0 && k <= E, "MoE routing: top {} of {} experts", k, E);
  out.N = N, out.E = E, out.k = k;
  out.norm_topk_prob = norm_topk_prob;
  out.probs.resize(static_cast<size_t>(N * E));
  out.expert.resize(static_cast<size_t>(N * k));
  out.weight.resize(static_cast<size_t>(N * k));
  out.router_expert.resize(replay != nullptr ? static_cast<size_t>(N * k) : 0);
  for (int64_t n = 0; n < N; ++n) {
    const float* l = logits + n * E;
    float* p = out.probs.data() + n * E;
    float m = l[0];
    for (int64_t e = 1; e < E; ++e) m = l[e] > m ? l[e] : m;
    float sum = 0.0f;
    for (int64_t e = 0; e < E; ++e) {
      p[e] = exp_f32(l[e] - m);
      sum += p[e];
    }
    for (int64_t e = 0; e < E; ++e) p[e] = p[e] / sum;
    // Top k by selection: slot j takes the largest probability not yet taken, the lower index on a
    // tie.
    int32_t* ex = out.expert.data() + n * k;
    float* w = out.weight.data() + n * k;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int64_t i = 0; i < j; ++i) taken = taken || ex[i] == e;
        if (!taken && (best < 0 || p[e] > p[best])) best = e;
      }
      ex[j] = static_cast<int32_t>(best);
    }
    if (replay != nullptr) {
      std::copy(ex, ex + k, out.router_expert.data() + n * k);
      const int32_t* given = replay + n * k;
      if (given[0] >= 0) {
        for (int64_t j = 0; j < k; ++j) {
          bool repeated = false;
          for (int64_t i = 0; i < j; ++i) repeated = repeated || given[i] == given[j];
          FP8RL_CHECK(given[j] >= 0 && given[j] < E && !repeated,
                      "MoE router replay: token {} slot {} names expert {} (expected {} distinct experts of 0..{})", n,
                      j, given[j], k, E - 1);
        }
        std::copy(given, given + k, ex);
      }
    }
    for (int64_t j = 0; j < k; ++j) w[j] = p[ex[j]];
    if (norm_topk_prob) {
      float s = 0.0f;
      for (int64_t j = 0; j < k; ++j) s += w[j];
      for (int64_t j = 0; j < k; ++j) w[j] = w[j] / s;
    }
  }
}

void route_backward(float* dlogits, const float* dweight, const MoeRouting& r, const float* dprobs) {
  const int64_t E = r.E, k = r.k;
  std::vector<float> dp(static_cast<size_t>(E));
  for (int64_t n = 0; n < r.N; ++n) {
    const float* p = r.probs.data() + n * E;
    const int32_t* ex = r.expert.data() + n * k;
    const float* w = r.weight.data() + n * k;
    const float* dw = dweight + n * k;
    std::fill(dp.begin(), dp.end(), 0.0f);
    if (r.norm_topk_prob) {
      // w_j = p_j / s, s = sum_i p_i: dp_j = (dw_j - sum_i dw_i w_i) / s.
      float s = 0.0f, dot = 0.0f;
      for (int64_t j = 0; j < k; ++j) s += p[ex[j]];
      for (int64_t j = 0; j < k; ++j) dot += dw[j] * w[j];
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(ex[j])] = (dw[j] - dot) / s;
    } else {
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(ex[j])] = dw[j];
    }
    if (dprobs != nullptr)
      for (int64_t e = 0; e < E; ++e) dp[static_cast<size_t>(e)] += dprobs[n * E + e];
    // Softmax: dlogit_e = p_e (dp_e - sum_i p_i dp_i).
    float dot = 0.0f;
    for (int64_t e = 0; e < E; ++e) dot += p[e] * dp[static_cast<size_t>(e)];
    float* dl = dlogits + n * E;
    for (int64_t e = 0; e < E; ++e) dl[e] = p[e] * (dp[static_cast<size_t>(e)] - dot);
  }
}

void group_by_expert(const MoeRouting& r, ExpertGroups& out) {
  const int64_t E = r.E, pairs = r.N * r.k;
  out.begin.assign(static_cast<size_t>(E + 1), 0);
  for (int64_t i = 0; i < pairs; ++i) ++out.begin[static_cast<size_t>(r.expert[static_cast<size_t>(i)]) + 1];
  for (int64_t e = 0; e < E; ++e) out.begin[static_cast<size_t>(e + 1)] += out.begin[static_cast<size_t>(e)];
  out.token.resize(static_cast<size_t>(pairs));
  out.slot.resize(static_cast<size_t>(pairs));
  out.row_of.resize(static_cast<size_t>(pairs));
  std::vector<int64_t> next(out.begin.begin(), out.begin.end() - 1);
  for (int64_t i = 0; i < pairs; ++i) {  // token-major: each expert's tokens come out ascending
    const int64_t row = next[static_cast<size_t>(r.expert[static_cast<size_t>(i)])]++;
    out.token[static_cast<size_t>(row)] = static_cast<int32_t>(i / r.k);
    out.slot[static_cast<size_t>(row)] = static_cast<int32_t>(i % r.k);
    out.row_of[static_cast<size_t>(i)] = static_cast<int32_t>(row);
  }
}

void gather_expert_inputs(float* x_grouped, const float* h, const ExpertGroups& groups, int64_t C) {
  for (size_t r = 0; r < groups.token.size(); ++r)
    std::memcpy(x_grouped + static_cast<int64_t>(r) * C, h + int64_t{groups.token[r]} * C,
                sizeof(float) * static_cast<size_t>(C));
}

void combine_expert_outputs(float* y, const float* out, const MoeRouting& r, const ExpertGroups& groups, int64_t C) {
  for (int64_t n = 0; n < r.N; ++n) {
    float* yn = y + n * C;
    std::memset(yn, 0, sizeof(float) * static_cast<size_t>(C));
    for (int64_t j = 0; j < r.k; ++j) {
      const float w = r.weight[static_cast<size_t>(n * r.k + j)];
      const float* o = out + int64_t{groups.row_of[static_cast<size_t>(n * r.k + j)]} * C;
      for (int64_t c = 0; c < C; ++c) yn[c] += w * o[c];
    }
  }
}

}  // namespace fp8rl
