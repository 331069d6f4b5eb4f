// Token sampling from one row of logits: temperature, top-k, top-p, and a random stream per
// sequence, so a sequence's samples depend only on (seed, sequence index, step) — never on which
// other sequences share its batch, or on the thread count.
#pragma once

#include <cstdint>

namespace fp8rl {

struct SamplingParams {
  float temperature = 1.0f;  // 0: greedy (argmax, lowest id on ties)
  int64_t top_k = 0;         // 0: off
  float top_p = 1.0f;        // 1: off
  uint64_t seed = 1;
};

struct SampledToken {
  int32_t token = 0;
  // Log-probability of `token` under the distribution it was drawn from: softmax(logits /
  // temperature), restricted to the top-k / top-p set and renormalised. With temperature 1 and no
  // truncation this is exactly token_logprobs_forward's value (the trainer's formula); greedy
  // decoding reports the untruncated log-prob of the argmax.
  float logprob = 0.0f;
};

// `logits` [V]; `scratch` holds at least 2 V floats. `sequence` and `step` select the random
// number: random_uniform(seed, sequence, step).
SampledToken sample_token(const float* logits, int64_t V, const SamplingParams& params, uint64_t sequence,
                          uint64_t step, float* scratch);

// The log-probability sample_token reports when it draws `token` from `logits` (teacher forcing:
// `fp8rl score`), bit for bit; -infinity for a token outside the top-k / top-p set. `scratch`
// holds at least V floats.
float token_logprob(const float* logits, int64_t V, const SamplingParams& params, int32_t token, float* scratch);

}  // namespace fp8rl
