// Log-probabilities of given tokens under softmax(logits), forward next to backward. This is the
// one function both engines use to turn logits into log-probs (and the sampler its log-sum-exp),
// so they agree by construction.
//
// The log-sum-exp of a row x [V] is defined by these steps, and every level (portable, AVX2,
// AVX-512) computes their bits (tests/kernels/logprob_test.cc):
//   m    = max_v x[v]
//   s_b  = for each block b of kLseBlock consecutive elements: 16 FP32 lanes, lane l adding
//          exp_f32(x[v] - m) for the block's v = l (mod 16) in index order, reduced by the fixed
//          tree lanes[l] += lanes[l + w], w = 8, 4, 2, 1
//   S    = the s_b summed in double, in block order
//   lse  = m + (float) log(S)
// (exp_f32 is the project's exponential with bit-identical vector lanes, numerics/exp.h.) FP32
// lanes keep the pass vectorized; the double sum over blocks keeps the error of a 152k-token
// vocabulary at about one FP32 rounding of S.
//
// Shapes: logits, dlogits [N, ld] (row n's V logits at n * ld); targets, logprob, lse, dlogprob
// [N]. A target < 0 means "no token": its log-prob is 0 and it gets no gradient.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace fp8rl {

inline constexpr int64_t kLseBlock = 2048;

float logsumexp_row(const float* logits, int64_t V, Isa isa = Isa::kAuto);

// logprob[n] = logits[n, target[n]] - lse[n] (0 where target[n] < 0); lse_out [N], if given,
// receives the rows' log-sum-exp (0 for rows without a target, which the backward skips). Rows
// run as tasks of the kernel pool.
void token_logprobs_forward(float* logprob, float* lse_out, const float* logits, int64_t ld, const int32_t* targets,
                            int64_t N, int64_t V, Isa isa = Isa::kAuto);
// The old entry point: ld = V, no lse output.
inline void token_logprobs_forward(float* logprob, const float* logits, const int32_t* targets, int64_t N, int64_t V) {
  token_logprobs_forward(logprob, nullptr, logits, V, targets, N, V);
}

// The gradient of sum_n dlogprob[n] * logprob[n] with respect to the logits of columns
// [v0, v0 + width) (a slice of the vocabulary, so the head's backward never holds all V columns):
//   dlogits[n, j] = (-dlogprob[n]) * exp_f32(logits[n, j] - lse[n]), plus dlogprob[n] where
//                   v0 + j == targets[n]; rows with target < 0 or dlogprob 0 are zero.
// `logits` and `dlogits` hold the slice's columns (row stride ld) and may be the same buffer.
void token_logprobs_backward(float* dlogits, const float* logits, int64_t ld, int64_t v0, int64_t width,
                             const float* lse, const float* dlogprob, const int32_t* targets, int64_t N,
                             Isa isa = Isa::kAuto);
// out[j] = exp_f32(x[j] - lse) for j < n: the probabilities of a row whose log-sum-exp is `lse`
// (the sampler's inverse CDF), vectorized, the same bits on every level.
void softmax_probs_row(float* out, const float* x, int64_t n, float lse, Isa isa = Isa::kAuto);

// The whole vocabulary (ld = width = V), the lse computed here.
void token_logprobs_backward(float* dlogits, const float* dlogprob, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V);

}  // namespace fp8rl
