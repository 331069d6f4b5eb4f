#include "model/lm_head.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/gemm/gemm.h"
#include "kernels/elementwise/logprob.h"
#include "numerics/codec.h"

namespace fp8rl {

namespace {

template <typename T>
T* sized(AlignedBuffer<T>& buf, int64_t n) {
  buf.resize(static_cast<size_t>(n));
  return buf.data();
}

void check_head(const Linear& head) {
  FP8RL_CHECK(head.precision() == Precision::kBF16 || head.precision() == Precision::kF32,
              "LM head '{}' runs in {}, expected bf16 or fp32", head.name(), precision_name(head.precision()));
}

// logits [rows, cols] (row stride ld) = x[rows of x, C] W[v0 : v0 + cols]^T, in the head's precision;
// `xb` is x as BF16 and `wb` W's rows [v0, v0 + cols) as BF16 (Linear::bf16_rows) for a BF16 head.
void head_product(const Linear& head, const float* x, const bf16_t* xb, const bf16_t* wb, int64_t rows, int64_t v0,
                  int64_t cols, float* logits, int64_t ld) {
  const int64_t C = head.in_features();
  if (head.precision() == Precision::kBF16) {
    gemm_nt_bf16(rows, cols, C, xb, C, wb, C, logits, ld);
  } else {
    gemm_nt_f32(rows, cols, C, x, C, head.f32_weights() + v0 * C, C, logits, ld);
  }
}

}  // namespace

void lm_head_logprobs_forward(const Linear& head, const float* x, int64_t N, const int32_t* targets, float* logprob,
                              float* lse, LmHeadScratch& s) {
  check_head(head);
  const int64_t V = head.out_features(), C = head.in_features();
  const bool bf16 = head.precision() == Precision::kBF16;
  check_token_ids(targets, N, V);
  // The rows with a target, in order; the others (prompt positions) get 0 and no logits.
  int32_t* rows = sized(s.rows, N);
  int64_t R = 0;
  for (int64_t n = 0; n < N; ++n) {
    if (targets[n] >= 0) {
      rows[R++] = static_cast<int32_t>(n);
    } else {
      logprob[n] = lse[n] = 0.0f;
    }
  }
  if (R == 0) return;
  // The head's input for those rows: BF16 codes of x's rows (a BF16 head), or x itself or a
  // gathered copy of its rows (an FP32 head).
  const float* xr = x;
  bf16_t* xb = nullptr;
  if (bf16) {
    xb = sized(s.x_bf16, R * C);
    if (R == N) {
      bf16_encode_f32(x, xb, N * C);
    } else {
      for (int64_t r = 0; r < R; ++r) bf16_encode_f32(x + rows[r] * C, xb + r * C, C);
    }
  } else if (R < N) {
    float* gathered = sized(s.x_rows, R * C);
    for (int64_t r = 0; r < R; ++r) std::copy_n(x + rows[r] * C, C, gathered + r * C);
    xr = gathered;
  }
  const int64_t blocks = (V + kLseBlock - 1) / kLseBlock;
  float* block_max = sized(s.block_max, R * blocks);
  float* block_sum = sized(s.block_sum, R * blocks);
  float* target_logit = sized(s.target_logit, R);
  float* logits = sized(s.logits, R * std::min(kLseBlock, V));
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t v0 = b * kLseBlock, width = std::min(kLseBlock, V - v0);
    const bf16_t* wb = bf16 ? head.bf16_rows(v0, width, s.w_bf16) : nullptr;
    head_product(head, xr, xb, wb, R, v0, width, logits, width);
    lse_block_stats_rows(block_max + b, block_sum + b, blocks, logits, width, width, R);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t j = targets[rows[r]] - v0;
      if (j >= 0 && j < width) target_logit[r] = logits[r * width + j];
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    const float l = lse_from_block_stats(block_max + r * blocks, block_sum + r * blocks, blocks);
    lse[rows[r]] = l;
    logprob[rows[r]] = target_logit[r] - l;
  }
}

void lm_head_logprobs_backward(const Linear& head, const float* x, int64_t N, const int32_t* targets, const float* lse,
                               const float* dlogprob, float* dx, bool accumulate_dx, float* dw, bool accumulate_dw,
                               LmHeadScratch& s) {
  check_head(head);
  const int64_t V = head.out_features(), C = head.in_features();
  const bool bf16 = head.precision() == Precision::kBF16;
  check_token_ids(targets, N, V);
  // The rows with a gradient (a target and dlogprob != 0), in order: every other row's dlogits
  // are zero, so its dx is zero (or dx as it was) and it adds nothing to dW.
  int32_t* rows = sized(s.rows, N);
  int64_t R = 0;
  for (int64_t n = 0; n < N; ++n)
    if (targets[n] >= 0 && dlogprob[n] != 0.0f) rows[R++] = static_cast<int32_t>(n);
  if (R == 0) {
    if (!accumulate_dx) std::fill(dx, dx + N * C, 0.0f);
    if (!accumulate_dw) std::fill(dw, dw + V * C, 0.0f);
    return;
  }
  // Those rows' inputs: all of them as they are, or gathered copies (x, dx, and the per-row
  // arrays) that the slices below work on, with dx scattered back at the end.
  const bool all = R == N;
  const float* xr = x;
  const int32_t* tr = targets;
  const float *lr = lse, *dr = dlogprob;
  float* dxr = dx;
  if (!all) {
    int32_t* t = sized(s.row_targets, R);
    float* l = sized(s.row_lse, R);
    float* d = sized(s.row_dlogprob, R);
    float* xg = sized(s.x_rows, R * C);
    dxr = sized(s.dx_rows, R * C);
    for (int64_t r = 0; r < R; ++r) {
      const int64_t n = rows[r];
      t[r] = targets[n], l[r] = lse[n], d[r] = dlogprob[n];
      std::copy_n(x + n * C, C, xg + r * C);
      if (accumulate_dx) std::copy_n(dx + n * C, C, dxr + r * C);
    }
    xr = xg, tr = t, lr = l, dr = d;
  }
  const int64_t width_max = std::min(kHeadSliceColumns, V);
  float* dl = sized(s.logits, R * width_max);
  bf16_t* xb = bf16 ? sized(s.x_bf16, R * C) : nullptr;
  bf16_t* dlb = bf16 ? sized(s.dlogits, R * width_max) : nullptr;
  if (bf16) bf16_encode_f32(xr, xb, R * C);
  for (int64_t v0 = 0; v0 < V; v0 += kHeadSliceColumns) {
    const int64_t width = std::min(kHeadSliceColumns, V - v0);
    const bf16_t* w = bf16 ? head.bf16_rows(v0, width, s.w_bf16) : nullptr;
    head_product(head, xr, xb, w, R, v0, width, dl, width);
    token_logprobs_backward(dl, dl, width, v0, width, lr, dr, tr, R);
    const bool acc = accumulate_dx || v0 > 0;
    if (bf16) {
      bf16_encode_f32(dl, dlb, R * width);
      gemm_nn_bf16(R, C, width, dlb, width, w, C, dxr, C, acc);
      gemm_tn_bf16(width, C, R, dlb, width, xb, C, dw + v0 * C, C, accumulate_dw);
    } else {
      const float* w = head.f32_weights() + v0 * C;
      gemm_nn_f32(R, C, width, dl, width, w, C, dxr, C, acc);
      gemm_tn_f32(width, C, R, dl, width, xr, C, dw + v0 * C, C, accumulate_dw);
    }
  }
  if (all) return;
  for (int64_t n = 0, r = 0; n < N; ++n) {
    if (r < R && rows[r] == n) {
      std::copy_n(dxr + r * C, C, dx + n * C);
      ++r;
    } else if (!accumulate_dx) {
      std::fill(dx + n * C, dx + (n + 1) * C, 0.0f);
    }
  }
}

void lm_head_logits(const Linear& head, const float* x, int64_t N, float* logits, LmHeadScratch& s) {
  check_head(head);
  const int64_t V = head.out_features(), C = head.in_features();
  const bool bf16 = head.precision() == Precision::kBF16;
  bf16_t* xb = nullptr;
  if (bf16) {
    xb = sized(s.x_bf16, N * C);
    bf16_encode_f32(x, xb, N * C);
  }
  for (int64_t v0 = 0; v0 < V; v0 += kHeadSliceColumns) {  // a GEMM element depends on K only
    const int64_t width = std::min(kHeadSliceColumns, V - v0);
    head_product(head, x, xb, bf16 ? head.bf16_rows(v0, width, s.w_bf16) : nullptr, N, v0, width, logits + v0, V);
  }
}

}  // namespace fp8rl
