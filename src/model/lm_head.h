// The LM head and the token log-probs in chunks, so that the logits of all N rows (N x V floats:
// 2.7 GB for 4,500 tokens of a 152k vocabulary) and their gradient never exist at once, the idea
// of Liger Kernel's fused linear cross-entropy and of Cut Cross-Entropy.
//
//   x [N, C]   the final norm's output (BF16 values unless the head is FP32)
//   W [V, C]   the head's weights (Linear: BF16 copy, or FP32 master with policy.fp32_lm_head); the
//              trainer's BF16 head keeps no copy, its rows are encoded from the master block by
//              block (Linear::bf16_rows: the same values, 0.31 GB less at a 152k vocabulary)
//
// Forward: the vocabulary in blocks of kLseBlock columns (the log-sum-exp's blocks,
// kernels/elementwise/logprob.h). For each block in order: logits [R, block] = x W[block]^T for the R rows
// that have a target (the GEMM the Linear's forward runs; prompt rows get log-prob 0 and no
// logits), then each row's block statistics (max, sum of exponentials) and, where the target falls
// in the block, its logit. The rows' lse come from their blocks' statistics, the log-probs from
// the target logits: the bits of token_logprobs_forward over the whole row (a GEMM element
// depends on K only, and the lse's blocks are computed alone). Only logprob [N] and lse [N] are
// kept, with 8 bytes per row and block of statistics; each block's weights are packed once for
// all rows.
//
// Backward: only the R rows with a gradient (a target and dlogprob != 0) take part; every other
// row's dlogits are zero, so its dx is 0 (or left as it was, accumulating) and it adds nothing to
// dW. Prompt and padding positions, and sequences whose advantage and KL term are both zero, cost
// nothing. The vocabulary goes in slices of kHeadSliceColumns (a constant: the order of the dx
// sum depends on it and on nothing else). For each slice in order: its logits [R, slice] are
// computed again (the same bits as in the forward: a GEMM element depends on K only), turned into
// dlogits in place, rounded to BF16 as Linear::backward rounds dY (BF16 head), then
//   dx        (+)= dlogits W[slice]        the slices summed in slice order
//   dW[slice] (+)= dlogits^T x             one GEMM over the R rows in order, as the unsliced
//                                          head's over those rows
// Recomputing the logits costs one more x W^T (a third more head FLOPs) and saves N x V floats.
#pragma once

#include <cstdint>

#include "core/aligned_buffer.h"
#include "model/linear.h"
#include "numerics/bf16.h"

namespace fp8rl {

inline constexpr int64_t kHeadSliceColumns = 2048;  // vocabulary columns per backward slice

// Storage reused from call to call (sized for the largest batch seen).
struct LmHeadScratch {
  AlignedBuffer<bf16_t> x_bf16;       // [N, C]
  AlignedBuffer<float> logits;        // [N, slice] or [N, block]
  AlignedBuffer<bf16_t> dlogits;      // [N, slice] BF16
  AlignedBuffer<int32_t> rows;        // the rows with a target (forward) or a gradient (backward)
  AlignedBuffer<float> x_rows;        // those rows of x [R, C] (forward: FP32 head), where some have none
  AlignedBuffer<float> dx_rows;       // backward: their dx [R, C]
  AlignedBuffer<int32_t> row_targets;  // backward: their targets, lse and dlogprob [R]
  AlignedBuffer<float> row_lse;
  AlignedBuffer<float> row_dlogprob;
  AlignedBuffer<float> block_max;     // forward: [R, blocks] lse statistics
  AlignedBuffer<float> block_sum;     // [R, blocks]
  AlignedBuffer<float> target_logit;  // [R]
  AlignedBuffer<bf16_t> w_bf16;       // a head without a BF16 copy: the block's or slice's rows [.., C]
};

// logprob [N] of targets [N] (< 0: none, log-prob 0), lse [N] (0 where there is no target).
void lm_head_logprobs_forward(const Linear& head, const float* x, int64_t N, const int32_t* targets, float* logprob,
                              float* lse, LmHeadScratch& scratch);

// dx [N, C] (+)= d/dx and dw [V, C] (+)= d/dW of sum_n dlogprob[n] * logprob[n], with lse from
// the forward. dx is overwritten unless `accumulate_dx`, dw unless `accumulate_dw` (as in
// Linear::backward).
void lm_head_logprobs_backward(const Linear& head, const float* x, int64_t N, const int32_t* targets, const float* lse,
                               const float* dlogprob, float* dx, bool accumulate_dx, float* dw, bool accumulate_dw,
                               LmHeadScratch& scratch);

// logits [N, V] of the rows x [N, C] (greedy decoding and tests; N small).
void lm_head_logits(const Linear& head, const float* x, int64_t N, float* logits, LmHeadScratch& scratch);

}  // namespace fp8rl
