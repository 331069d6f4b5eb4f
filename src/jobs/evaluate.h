// Greedy decoding with the trainer's full forward pass (the whole prefix is recomputed at every
// step). Slow but obviously right: the oracle for the generation engine's greedy path, and the
// evaluator until that engine exists.
#pragma once

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "core/communicator.h"
#include "tasks/reward.h"
#include "tasks/task.h"
#include "tokenizer/tokenizer.h"

namespace fp8rl {

// Continues every prompt (token ids, starting with bos) by the argmax token (lowest id on ties)
// until eos or `max_new_tokens`; returns the new tokens of each prompt (eos excluded).
std::vector<std::vector<int32_t>> greedy_continue(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_new_tokens, int32_t eos, int32_t pad);

// The first `max_examples` validation examples' prompts, encoded; throws Error naming the
// example if a prompt and `max_new_tokens` do not fit `max_seq_len` (call it before a job
// touches its run directory, so that a long validation prompt fails the job at once).
std::vector<std::vector<int32_t>> encode_validation_prompts(const Task& task, const Tokenizer& tokenizer,
                                                            int64_t max_examples, int64_t max_new_tokens,
                                                            int64_t max_seq_len);

// Greedy accuracy (mean reward, scored by `reward`) on the first `max_examples` validation
// examples, in batches of `batch_size` prompts (checked first by encode_validation_prompts).
// Under a communicator of several ranks, batch i runs on rank i % N and the rewards are gathered
// and summed in example order (the same value on every rank).
double greedy_validation_accuracy(Transformer& model, const Task& task, RewardFunction& reward, const Tokenizer& tokenizer,
                                  int64_t max_examples, int64_t max_new_tokens, int64_t batch_size = 64,
                                  const dist::Communicator& comm = dist::world());

}  // namespace fp8rl
