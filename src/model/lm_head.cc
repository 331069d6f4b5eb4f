#include "model/lm_head.h"

#include <algorithm>

#include "core/check.h"
#include "kernels/gemm.h"
#include "kernels/logprob.h"
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
// `xb` is x as BF16 for a BF16 head.
void head_product(const Linear& head, const float* x, const bf16_t* xb, int64_t rows, int64_t v0, int64_t cols,
                  float* logits, int64_t ld) {
  const int64_t C = head.in_features();
  if (head.precision() == Precision::kBF16) {
    gemm_nt_bf16(rows, cols, C, xb, C, head.bf16_weights().data() + v0 * C, C, logits, ld);
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
  const int64_t chunk = std::clamp<int64_t>(kHeadChunkElements / V, 1, std::max<int64_t>(N, 1));
  float* logits = sized(s.logits, chunk * V);
  bf16_t* xb = bf16 ? sized(s.x_bf16, N * C) : nullptr;
  if (bf16) bf16_encode_f32(x, xb, N * C);
  for (int64_t n0 = 0; n0 < N; n0 += chunk) {
    const int64_t rows = std::min(chunk, N - n0);
    bool any = false;
    for (int64_t n = n0; n < n0 + rows; ++n) any = any || targets[n] >= 0;
    if (!any) {  // no target in the chunk (a prompt): no logits needed
      std::fill(logprob + n0, logprob + n0 + rows, 0.0f);
      std::fill(lse + n0, lse + n0 + rows, 0.0f);
      continue;
    }
    head_product(head, x + n0 * C, bf16 ? xb + n0 * C : nullptr, rows, 0, V, logits, V);
    token_logprobs_forward(logprob + n0, lse + n0, logits, V, targets + n0, rows, V);
  }
}

void lm_head_logprobs_backward(const Linear& head, const float* x, int64_t N, const int32_t* targets, const float* lse,
                               const float* dlogprob, float* dx, bool accumulate_dx, float* dw, bool accumulate_dw,
                               LmHeadScratch& s) {
  check_head(head);
  const int64_t V = head.out_features(), C = head.in_features();
  const bool bf16 = head.precision() == Precision::kBF16;
  const int64_t width_max = std::min(kHeadSliceColumns, V);
  float* dl = sized(s.logits, N * width_max);
  bf16_t* xb = bf16 ? sized(s.x_bf16, N * C) : nullptr;
  bf16_t* dlb = bf16 ? sized(s.dlogits, N * width_max) : nullptr;
  if (bf16) bf16_encode_f32(x, xb, N * C);
  for (int64_t v0 = 0; v0 < V; v0 += kHeadSliceColumns) {
    const int64_t width = std::min(kHeadSliceColumns, V - v0);
    head_product(head, x, xb, N, v0, width, dl, width);
    token_logprobs_backward(dl, dl, width, v0, width, lse, dlogprob, targets, N);
    const bool acc = accumulate_dx || v0 > 0;
    if (bf16) {
      const bf16_t* w = head.bf16_weights().data() + v0 * C;
      bf16_encode_f32(dl, dlb, N * width);
      gemm_nn_bf16(N, C, width, dlb, width, w, C, dx, C, acc);
      gemm_tn_bf16(width, C, N, dlb, width, xb, C, dw + v0 * C, C, accumulate_dw);
    } else {
      const float* w = head.f32_weights() + v0 * C;
      gemm_nn_f32(N, C, width, dl, width, w, C, dx, C, acc);
      gemm_tn_f32(width, C, N, dl, width, x, C, dw + v0 * C, C, accumulate_dw);
    }
  }
}

void lm_head_logits(const Linear& head, const float* x, int64_t N, float* logits, LmHeadScratch& s) {
  check_head(head);
  const int64_t C = head.in_features();
  bf16_t* xb = nullptr;
  if (head.precision() == Precision::kBF16) {
    xb = sized(s.x_bf16, N * C);
    bf16_encode_f32(x, xb, N * C);
  }
  head_product(head, x, xb, N, 0, head.out_features(), logits, head.out_features());
}

}  // namespace fp8rl
