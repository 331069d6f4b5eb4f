// Log-probabilities of given tokens under softmax(logits), forward next to backward. This is the
// one function both engines use to turn logits into log-probs, so they agree by construction.
//
// Shapes: logits, dlogits [N, V]; targets, logprob, dlogprob [N]. A target < 0 means "no token":
// its log-prob is 0 and it gets no gradient.
#pragma once

#include <cstdint>

namespace fp8rl {

// logprob[n] = logits[n, target[n]] - logsumexp(logits[n, :]), the sum in double.
void token_logprobs_forward(float* logprob, const float* logits, const int32_t* targets, int64_t N, int64_t V);
float logsumexp_row(const float* logits, int64_t V);

// dlogits[n, v] = dlogprob[n] * (1[v == target[n]] - softmax(logits[n])[v]); overwrites dlogits.
void token_logprobs_backward(float* dlogits, const float* dlogprob, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V);

}  // namespace fp8rl
