// Log-probabilities of given tokens under softmax(logits), forward next to backward. This is the
// one function both engines use to turn logits into log-probs (and the sampler its log-sum-exp),
// so they agree by construction.
//
// The log-sum-exp of a row x [V] is defined by these steps, and every level (portable, AVX2,
// AVX-512) computes their bits (tests/kernels/logprob_test.cc). For each block b of kLseBlock
// consecutive elements (the last one shorter):
//   m_b  = the block's max: 16 FP32 lanes, lane l the max of the block's v = l (mod 16), reduced
//          by the fixed tree lanes[l] = max(lanes[l + w], lanes[l]), w = 8, 4, 2, 1
//   s_b  = 16 FP32 lanes, lane l adding exp_f32(x[v] - m_b) for the block's v = l (mod 16) in
//          index order, reduced by the tree lanes[l] += lanes[l + w]
// then, over the blocks in order,
//   m    = max_b m_b
//   S    = sum of (double) s_b * (double) exp_f32(m_b - m) in double (blocks with m_b = -Inf add 0)
//   lse  = m + (float) log(S)
// (exp_f32 is the project's exponential with bit-identical vector lanes, numerics/exp.h.) Each
// block depends only on its own logits, so a caller holding one block of columns at a time (the
// LM head's forward walks the vocabulary in slices) computes the same bits as one holding the
// whole row (the sampler). FP32 lanes keep the pass vectorized; the double sum over blocks keeps
// the error of a 152k-token vocabulary at about one FP32 rounding of S.
//
// Shapes: logits, dlogits [N, ld] (row n's V logits at n * ld); targets, logprob, lse, dlogprob
// [N]. A target < 0 means "no token": its log-prob is 0 and it gets no gradient.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"

namespace fp8rl {

inline constexpr int64_t kLseBlock = 2048;

float logsumexp_row(const float* logits, int64_t V, Isa isa = Isa::kAuto);

// Throws unless every target[n] < V (a clear error naming the position).
void check_token_ids(const int32_t* targets, int64_t N, int64_t V);

// The definition in two parts, for callers that see the rows a block of columns at a time:
// lse_block_stats_rows writes m_b and s_b of `rows` rows' block (row r's n <= kLseBlock logits at
// logits + r * ld, starting at a block boundary of its row) to max[r * stats_ld] and
// sum[r * stats_ld], rows running as tasks of the kernel pool; lse_from_block_stats turns one
// row's `blocks` (m_b, s_b) pairs, in block order, into its lse.
float lse_from_block_stats(const float* max, const float* sum, int64_t blocks);
void lse_block_stats_rows(float* max, float* sum, int64_t stats_ld, const float* logits, int64_t ld, int64_t n,
                          int64_t rows, Isa isa = Isa::kAuto);

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
