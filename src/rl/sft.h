// Supervised fine-tuning on (prompt, answer) pairs: the warm start of RL. Only answer tokens
// (and the closing eos) are scored; prompt tokens are context.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "model/optimizer.h"
#include "model/transformer.h"
#include "core/communicator.h"

namespace fp8rl {

// One tokenized example: the model sees bos + prompt + answer and is scored on answer + eos.
struct SftExample {
  std::vector<int32_t> prompt;  // token ids from Tokenizer::encode_prompt (bos and framing included)
  std::vector<int32_t> answer;  // token ids, without eos
};

// Right-padded batch of examples; targets are set on the rows that predict an answer token or
// the eos, -1 elsewhere.
TokenBatch make_sft_batch(const std::vector<const SftExample*>& examples, int32_t eos, int32_t pad);

struct SftStepResult {
  double loss = 0;       // mean negative log-likelihood per scored token
  int64_t tokens = 0;    // scored tokens
  double grad_norm = 0;  // before clipping; non-finite means the step was skipped
  bool skipped = false;
  // MoE: the load-balancing loss (model/moe_load_balance.h) of the step, each micro-batch's
  // weighted by its share of the sequences, whether or not it is trained on; NaN for a dense model.
  double moe_aux_loss = std::numeric_limits<double>::quiet_NaN();
};

// One optimizer step on the mean token NLL over all micro-batches (gradients accumulate; the
// mean's denominator is the scored tokens of the whole global batch), then a refresh of the
// model's low-precision weights. A non-finite loss or gradient skips the update.
// Under a communicator of several ranks, each runs its share of the micro-batches
// (rl/data_parallel.h) and every rank takes the same optimizer step.
// `aux_loss_coef` (MoE, policy.aux_loss_coef): the weight of the load-balancing loss added, each
// micro-batch's weighted by its share of the sequences.
SftStepResult sft_step(Transformer& model, AdamW& optimizer, const std::vector<TokenBatch>& micro_batches, double lr,
                       const dist::Communicator& comm = dist::world(), double aux_loss_coef = 0.0);
inline SftStepResult sft_step(Transformer& model, AdamW& optimizer, const TokenBatch& batch, double lr) {
  return sft_step(model, optimizer, std::vector<TokenBatch>{batch}, lr);
}

}  // namespace fp8rl
