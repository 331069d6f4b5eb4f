#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/thread_pool.h"
#include "kernels/attention_row.h"
#include "kernels/gemm.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {
void check_shape(const AttentionShape& s) {
  FP8RL_CHECK(s.B > 0 && s.T > 0 && s.Hq > 0 && s.Hkv > 0 && s.D > 0 && s.Hq % s.Hkv == 0,
              "attention: bad shape B={} T={} Hq={} Hkv={} D={}", s.B, s.T, s.Hq, s.Hkv, s.D);
}
}  // namespace

void attention_forward(float* o, float* probs, const float* q, const float* k, const float* v, const AttentionShape& s,
                       bool bf16, const AttentionHeadScales* head_scales) {
  check_shape(s);
  const int64_t ldq = s.Hq * s.D, ldkv = s.Hkv * s.D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
  // One task per (sequence, kv head). Its query heads and kRows consecutive rows go through one
  // attention_queries_kv call: they read the same K/V rows, which then come from L1 for all of them
  // instead of from L2 for each row. Disjoint outputs, the same arithmetic on any thread.
  constexpr int64_t kRows = 8;
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv, h0 = g * group;
    std::vector<AttentionQuery> queries;
    for (int64_t t0 = 0; t0 < s.T; t0 += kRows) {
      const int64_t rows = std::min(kRows, s.T - t0);
      queries.clear();
      for (int64_t t = t0; t < t0 + rows; ++t)
        for (int64_t h = h0; h < h0 + group; ++h) {
          float* p = probs + ((b * s.Hq + h) * s.T + t) * s.T;  // row t of head h's [T, T]
          std::fill(p + t + 1, p + s.T, 0.0f);
          queries.push_back({q + (b * s.T + t) * ldq + h * s.D, o + (b * s.T + t) * ldq + h * s.D, p, t + 1});
        }
      const AttentionRows causal{k + b * s.T * ldkv + g * s.D, v + b * s.T * ldkv + g * s.D, t0 + rows};  // stride ldkv
      attention_queries_kv(queries.data(), static_cast<int>(queries.size()), &causal, 1, s.D, ldkv, KvElement::kF32,
                           head_scales ? head_scales->score[g] : scale, head_scales ? head_scales->value[g] : 1.0f,
                           bf16);
    }
  });
}

namespace {

// Row t of the softmax backward with the score scale: dS[j] = P[j] (dP[j] - sum_j P dP) * scale for
// j <= t (the sum in 16 lanes and the tree), each passed to store(j, value).
template <typename Store>
void softmax_backward_row(const float* p, const float* dp, int64_t t, float scale, Store store) {
  float lanes[16] = {};
  for (int64_t j = 0; j <= t; ++j) lanes[j % 16] += p[j] * dp[j];
  const float dot = attention_tree_sum(lanes);
  for (int64_t j = 0; j <= t; ++j) store(j, p[j] * (dp[j] - dot) * scale);
}

// rows x D of `src` (leading dimension ld) as BF16 into dst [rows, D]; the values are BF16 already
// where the header says so, so this is exact.
void to_bf16_rows(bf16_t* dst, const float* src, int64_t rows, int64_t D, int64_t ld) {
  for (int64_t r = 0; r < rows; ++r) bf16_encode_f32(src + r * ld, dst + r * D, D);
}

// attention_backward with BF16 operands (see the header): the FP32 path's blocks and order, the
// BF16 GEMMs, dS rounded once.
void attention_backward_bf16(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                             const float* k, const float* v, const AttentionShape& s) {
  const int64_t T = s.T, D = s.D, ldq = s.Hq * D, ldkv = s.Hkv * D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  constexpr int64_t kBlock = 64;
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv, kv_off = b * T * ldkv + g * D;
    thread_local std::vector<float> dp;                       // [T, T] dP, then dS in FP32
    thread_local std::vector<bf16_t> kb, vb, qb, ob, pb, sb;  // [T, D] x 4, [T, T] x 2
    dp.resize(static_cast<size_t>(T * T));
    for (auto* buf : {&kb, &vb, &qb, &ob}) buf->resize(static_cast<size_t>(T * D));
    pb.resize(static_cast<size_t>(T * T));
    sb.resize(static_cast<size_t>(T * T));
    to_bf16_rows(kb.data(), k + kv_off, T, D, ldkv);
    to_bf16_rows(vb.data(), v + kv_off, T, D, ldkv);
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t q_off = b * T * ldq + h * D;
      const float* p = probs + (b * s.Hq + h) * T * T;
      to_bf16_rows(qb.data(), q + q_off, T, D, ldq);
      to_bf16_rows(ob.data(), dout + q_off, T, D, ldq);  // dO rounded here
      for (int64_t t = 0; t < T; ++t) {
        bf16_encode_f32(p + t * T, pb.data() + t * T, t + 1);
        std::fill(pb.begin() + t * T + t + 1, pb.begin() + (t + 1) * T, bf16_t{0});
      }
      for (int64_t j0 = 0; j0 < T; j0 += kBlock) {  // dV[j] += sum_{t >= j} P[t, j] dO[t]
        const int64_t jn = std::min(kBlock, T - j0);
        gemm_tn_bf16(jn, D, T - j0, pb.data() + j0 * T + j0, T, ob.data() + j0 * D, D, dv + kv_off + j0 * ldkv, ldkv,
                     /*accumulate=*/true);
      }
      for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
        const int64_t tn = std::min(kBlock, T - t0), width = t0 + tn;
        gemm_nt_bf16(tn, width, D, ob.data() + t0 * D, D, vb.data(), D, dp.data() + t0 * T, T);  // dP
        for (int64_t t = t0; t < t0 + tn; ++t) {  // dS in FP32 over dP's row, then rounded once
          float* dr = dp.data() + t * T;
          softmax_backward_row(p + t * T, dr, t, scale, [&](int64_t j, float ds) { dr[j] = ds; });
          bf16_t* sr = sb.data() + t * T;
          bf16_encode_f32(dr, sr, t + 1);
          std::fill(sr + t + 1, sr + width, bf16_t{0});
        }
        gemm_nn_bf16(tn, D, width, sb.data() + t0 * T, T, kb.data(), D, dq + q_off + t0 * ldq, ldq);  // dQ = dS K
      }
      for (int64_t j0 = 0; j0 < T; j0 += kBlock) {  // dK[j] += sum_{t >= j} dS[t, j] Q[t]
        const int64_t jn = std::min(kBlock, T - j0);
        gemm_tn_bf16(jn, D, T - j0, sb.data() + j0 * T + j0, T, qb.data() + j0 * D, D, dk + kv_off + j0 * ldkv, ldkv,
                     /*accumulate=*/true);
      }
    }
  });
}

}  // namespace

void attention_backward(float* dq, float* dk, float* dv, const float* dout, const float* probs, const float* q,
                        const float* k, const float* v, const AttentionShape& s, bool bf16) {
  check_shape(s);
  if (bf16) {
    std::memset(dk, 0, sizeof(float) * static_cast<size_t>(s.B * s.T * s.Hkv * s.D));
    std::memset(dv, 0, sizeof(float) * static_cast<size_t>(s.B * s.T * s.Hkv * s.D));
    return attention_backward_bf16(dq, dk, dv, dout, probs, q, k, v, s);
  }
  const int64_t T = s.T, D = s.D, ldq = s.Hq * D, ldkv = s.Hkv * D, group = s.Hq / s.Hkv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::memset(dk, 0, sizeof(float) * static_cast<size_t>(s.B * T * ldkv));
  std::memset(dv, 0, sizeof(float) * static_cast<size_t>(s.B * T * ldkv));
  // Causal: P and dS are zero above the diagonal, so every GEMM runs on blocks of kBlock rows
  // (queries) or columns (keys) and skips the zero part: a query block t0 reads keys < t0 + tn,
  // a key block j0 receives from queries >= j0 (about 5/8 of the full products at T = 256).
  constexpr int64_t kBlock = 64;
  // One task per (sequence, kv head): its query heads in order, so dK and dV of the kv head
  // accumulate in the same order as a single loop; the GEMMs inside run on the task's thread.
  kernel_thread_pool().parallel_for(s.B * s.Hkv, [&](int64_t task) {
    const int64_t b = task / s.Hkv, g = task % s.Hkv;
    thread_local std::vector<float> ds;
    ds.resize(static_cast<size_t>(T * T));  // [T, T], row t valid up to the end of its block
    for (int64_t h = g * group; h < (g + 1) * group; ++h) {
      const int64_t q_off = b * T * ldq + h * D, kv_off = b * T * ldkv + g * D;
      const float* p = probs + (b * s.Hq + h) * T * T;
      for (int64_t j0 = 0; j0 < T; j0 += kBlock) {  // dV[j] += sum_{t >= j} P[t, j] dO[t]
        const int64_t jn = std::min(kBlock, T - j0);
        gemm_tn_f32(jn, D, T - j0, p + j0 * T + j0, T, dout + q_off + j0 * ldq, ldq, dv + kv_off + j0 * ldkv, ldkv,
                    /*accumulate=*/true);
      }
      for (int64_t t0 = 0; t0 < T; t0 += kBlock) {
        const int64_t tn = std::min(kBlock, T - t0), width = t0 + tn;
        // dP = dO V^T on the block's rows and the keys they see.
        gemm_nt_f32(tn, width, D, dout + q_off + t0 * ldq, ldq, v + kv_off, ldkv, ds.data() + t0 * T, T);
        // dS = P * (dP - sum_j P dP) * scale (softmax backward, then the score scale), zero past t.
        for (int64_t t = t0; t < t0 + tn; ++t) {
          float* dr = ds.data() + t * T;
          softmax_backward_row(p + t * T, dr, t, scale, [&](int64_t j, float v) { dr[j] = v; });
          for (int64_t j = t + 1; j < width; ++j) dr[j] = 0.0f;
        }
        // dQ = dS K over the keys the block sees.
        gemm_nn_f32(tn, D, width, ds.data() + t0 * T, T, k + kv_off, ldkv, dq + q_off + t0 * ldq, ldq);
      }
      for (int64_t j0 = 0; j0 < T; j0 += kBlock) {  // dK[j] += sum_{t >= j} dS[t, j] Q[t]
        const int64_t jn = std::min(kBlock, T - j0);
        gemm_tn_f32(jn, D, T - j0, ds.data() + j0 * T + j0, T, q + q_off + j0 * ldq, ldq, dk + kv_off + j0 * ldkv, ldkv,
                    /*accumulate=*/true);
      }
    }
  });
}

}  // namespace fp8rl
