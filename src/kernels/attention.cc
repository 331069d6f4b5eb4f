#include "kernels/attention.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/attention_row.h"
#include "core/thread_pool.h"
#include "kernels/gemm.h"

namespace fp8rl {

namespace {
void check_shape(const AttentionShape& s) {
  FP8RL_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hkv > 0 && s.D > 0 && s.Hq % s.Hkv == 0,
              "attention: bad shape B={} T={} Hq={} Hkv={} D={}", s.B, s.T, s.Hq, s.Hkv, s.D);
}
}  // namespace

void attention_forward(float* o, float* probs, const float* q, const float* k, const float* v, const AttentionShape& s) {
  check_shape(s);
  const int64_t ldq = s.Hq * s.D, ldkv = s.Hkv * s.D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  // One task per (sequence, kv head), its query heads together (they read the same K/V rows):
  // disjoint outputs, the same arithmetic on any thread.
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv, h0 = g * group;
    const AttentionRows rows{k + b * s.T * ldkv + g * s.D, v + b * s.T * ldkv + g * s.D, 0};  // [T, D], stride ldkv
    float* p = probs + (b * s.Hq + h0) * s.T * s.T;  // [group, T, T]
    for (int64_t t = 0; t < s.T; ++t) {
      AttentionRows causal = rows;
      causal.rows = t + 1;
      attention_group_kv(o + (b * s.T + t) * ldq + h0 * s.D, s.D, p + t * s.T, s.T * s.T,
                         q + (b * s.T + t) * ldq + h0 * s.D, s.D, group, &causal, 1, t + 1, s.D, ldkv, KvElement::kF32,
                         scale, 1.0f);
      for (int64_t h = 0; h < group; ++h)
        for (int64_t j = t + 1; j < s.T; ++j) p[h * s.T * s.T + t * s.T + j] = 0.0f;
    }
  });
}

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionShape& s) {
  check_shape(s);
  const int64_t ldq = s.Hq * s.D, ldkv = s.Hkv * s.D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  std::memset(dk, 0, sizeof(float) * static_cast<size_t>(s.B * s.T * ldkv));
  std::memset(dv, 0, sizeof(float) * static_cast<size_t>(s.B * s.T * ldkv));
  // One task per (sequence, kv head): its query heads in order, so dK and dV of the kv head
  // accumulate in the same order as a single loop; the GEMMs inside run on the task's thread.
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv;
    thread_local std::vector<float> ds;
    ds.resize(static_cast<size_t>(s.T * s.T));  // [T, T]
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t q_off = b * s.T * ldq + h * s.D, kv_off = b * s.T * ldkv + g * s.D;
      const float* p = probs + (b * s.Hq + h) * s.T * s.T;
      // dV += P^T dO ; dP = dO V^T
      gemm_tn_f32(s.T, s.D, s.T, p, s.T, dout + q_off, ldq, dv + kv_off, ldkv, /*accumulate=*/true);
      gemm_nt_f32(s.T, s.T, s.D, dout + q_off, ldq, v + kv_off, ldkv, ds.data(), s.T);
      // dS = P * (dP - sum_j P dP) * scale   (softmax backward, then the score scale)
      for (int64_t t = 0; t < s.T; ++t) {
        const float* pr = p + t * s.T;
        float* dr = ds.data() + t * s.T;
        float dot = 0.0f;
        for (int64_t j = 0; j <= t; ++j) dot += pr[j] * dr[j];
        for (int64_t j = 0; j <= t; ++j) dr[j] = pr[j] * (dr[j] - dot) * scale;
        for (int64_t j = t + 1; j < s.T; ++j) dr[j] = 0.0f;
      }
      // dQ = dS K ; dK += dS^T Q
      gemm_nn_f32(s.T, s.D, s.T, ds.data(), s.T, k + kv_off, ldkv, dq + q_off, ldq);
      gemm_tn_f32(s.T, s.D, s.T, ds.data(), s.T, q + q_off, ldq, dk + kv_off, ldkv, /*accumulate=*/true);
    }
  });
}

}  // namespace fp8rl
