#include "rl/sft.h"

#include <array>
#include <cmath>

#include "core/check.h"
#include "rl/data_parallel.h"

namespace fp8rl {

TokenBatch make_sft_batch(const std::vector<const SftExample*>& examples, int32_t eos, int32_t pad) {
  FP8RL_CHECK(!examples.empty(), "make_sft_batch: no examples");
  int64_t T = 0;
  for (const SftExample* e : examples) T = std::max<int64_t>(T, static_cast<int64_t>(e->prompt.size() + e->answer.size()));
  TokenBatch batch = TokenBatch::empty(static_cast<int64_t>(examples.size()), T, pad);
  for (size_t b = 0; b < examples.size(); ++b) {
    const SftExample& e = *examples[b];
    int32_t* tokens = batch.tokens.data() + b * static_cast<size_t>(T);
    int32_t* targets = batch.targets.data() + b * static_cast<size_t>(T);
    // Row t holds token t and predicts token t+1: answer tokens and the final eos are scored.
    std::vector<int32_t> seq = e.prompt;
    seq.insert(seq.end(), e.answer.begin(), e.answer.end());
    for (size_t t = 0; t < seq.size(); ++t) tokens[t] = seq[t];
    FP8RL_CHECK(!e.prompt.empty(), "make_sft_batch: example {} has an empty prompt (it needs at least bos)", b);
    const size_t first_scored = e.prompt.size() - 1;  // row of the last prompt token predicts answer[0]
    for (size_t t = first_scored; t < seq.size(); ++t) targets[t] = t + 1 < seq.size() ? seq[t + 1] : eos;
    batch.lengths[b] = static_cast<int32_t>(seq.size());
  }
  return batch;
}

SftStepResult sft_step(Transformer& model, AdamW& optimizer, const std::vector<TokenBatch>& micro_batches, double lr,
                       const dist::Communicator& comm, double aux_loss_coef) {
  SftStepResult r;
  int64_t sequences = 0;
  for (const TokenBatch& b : micro_batches) {
    for (int32_t t : b.targets) r.tokens += t >= 0;
    sequences += b.B;
  }
  FP8RL_CHECK(r.tokens > 0, "sft_step: the batch scores no tokens");
  // d(mean NLL)/d logprob = -1 / tokens on every scored row of the global batch.
  const float d = -1.0f / static_cast<float>(r.tokens);
  // Each micro-batch's NLL summed from zero, then the micro-batches' in order (as the gradient:
  // rl/data_parallel.h), on whichever rank ran it.
  const auto run = [&](int64_t k, EmbeddingRowGrads* embedding_rows) {
    const TokenBatch& batch = micro_batches[static_cast<size_t>(k)];
    const int64_t N = batch.B * batch.T;
    std::vector<float> logprobs(static_cast<size_t>(N)), dlogprobs(static_cast<size_t>(N), 0.0f);
    model.forward(batch, logprobs.data());
    double nll = 0;
    for (int64_t n = 0; n < N; ++n) {
      if (batch.targets[static_cast<size_t>(n)] < 0) continue;
      nll -= logprobs[static_cast<size_t>(n)];
      dlogprobs[static_cast<size_t>(n)] = d;
    }
    const double share = static_cast<double>(batch.B) / static_cast<double>(sequences);
    model.backward(dlogprobs.data(), embedding_rows, aux_loss_coef * share);
    const double aux = model.config().is_moe() ? model.moe_aux_loss() * share : 0.0;
    return dist::to_bytes(std::array<double, 2>{nll, aux});
  };
  double nll = 0, aux = 0;
  for (const std::vector<std::byte>& bytes :
       dist::accumulate_gradients(comm, model, static_cast<int64_t>(micro_batches.size()), run).outputs) {
    const auto sums = dist::from_bytes<std::array<double, 2>>(bytes);
    nll += sums[0];
    aux += sums[1];
  }
  r.loss = nll / static_cast<double>(r.tokens);
  if (model.config().is_moe()) r.moe_aux_loss = aux;
  if (!std::isfinite(r.loss)) {
    r.skipped = true;
    r.grad_norm = r.loss;
    return r;
  }
  r.grad_norm = dist::optimizer_step(comm, optimizer, model, lr);
  r.skipped = !std::isfinite(r.grad_norm);
  if (!r.skipped) model.refresh_weights();
  return r;
}

}  // namespace fp8rl
