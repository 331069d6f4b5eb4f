#include "jobs/evaluate.h"

#include "core/check.h"
#include "rl/data_parallel.h"
#include "jobs/model_source.h"

namespace fp8rl {

std::vector<std::vector<int32_t>> greedy_continue(Transformer& model, const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_new_tokens, int32_t eos, int32_t pad) {
  const int64_t B = static_cast<int64_t>(prompts.size());
  const int64_t V = model.config().vocab_size;
  std::vector<std::vector<int32_t>> seqs = prompts;
  std::vector<std::vector<int32_t>> out(prompts.size());
  std::vector<bool> done(prompts.size(), false);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    int64_t T = 0;
    for (const auto& s : seqs) T = std::max<int64_t>(T, static_cast<int64_t>(s.size()));
    FP8RL_CHECK(T <= model.config().max_seq_len, "greedy decoding: {} tokens exceed max_seq_len {}", T,
                model.config().max_seq_len);
    TokenBatch batch = TokenBatch::empty(B, T, pad);
    for (int64_t b = 0; b < B; ++b) {
      const auto& s = seqs[static_cast<size_t>(b)];
      FP8RL_CHECK(!s.empty(), "greedy decoding: prompt {} is empty (it needs at least bos)", b);
      std::copy(s.begin(), s.end(), batch.tokens.begin() + b * T);
      batch.lengths[static_cast<size_t>(b)] = static_cast<int32_t>(s.size());
    }
    std::vector<float> unused(static_cast<size_t>(B * T));
    model.forward(batch, unused.data(), /*for_backward=*/false);
    std::vector<int64_t> last_rows;  // each sequence's last position
    for (int64_t b = 0; b < B; ++b) last_rows.push_back(b * T + static_cast<int64_t>(seqs[static_cast<size_t>(b)].size()) - 1);
    std::vector<float> logits(static_cast<size_t>(B * V));
    model.logits(last_rows, logits.data());
    bool any = false;
    for (int64_t b = 0; b < B; ++b) {
      if (done[static_cast<size_t>(b)]) continue;
      const float* row = logits.data() + b * V;
      int32_t best = 0;
      for (int64_t v = 1; v < V; ++v)
        if (row[v] > row[best]) best = static_cast<int32_t>(v);
      if (best == eos) {
        done[static_cast<size_t>(b)] = true;
        continue;
      }
      seqs[static_cast<size_t>(b)].push_back(best);
      out[static_cast<size_t>(b)].push_back(best);
      any = true;
    }
    if (!any) break;
  }
  return out;
}

std::vector<std::vector<int32_t>> encode_validation_prompts(const Task& task, const Tokenizer& tokenizer,
                                                            int64_t max_examples, int64_t max_new_tokens,
                                                            int64_t max_seq_len) {
  const auto& val = task.validation();
  const std::vector<Example> first(val.begin(), val.begin() + std::min<int64_t>(max_examples, std::ssize(val)));
  return encode_prompts(tokenizer, first, max_new_tokens, max_seq_len, "validation");
}

double greedy_validation_accuracy(Transformer& model, const Task& task, RewardFunction& reward, const Tokenizer& tokenizer,
                                  int64_t max_examples, int64_t max_new_tokens, int64_t batch_size,
                                  const dist::Communicator& comm) {
  const auto& val = task.validation();
  const int64_t n = std::min<int64_t>(max_examples, static_cast<int64_t>(val.size()));
  FP8RL_CHECK(n > 0, "task '{}' has no validation examples", task.name());
  const std::vector<std::vector<int32_t>> encoded =
      encode_validation_prompts(task, tokenizer, n, max_new_tokens, model.config().max_seq_len);
  const int64_t batches = (n + batch_size - 1) / batch_size;
  std::vector<double> mine;  // this rank's batches' rewards, in order
  for (int64_t b = comm.rank(); b < batches; b += comm.size()) {
    const int64_t i0 = b * batch_size, i1 = std::min(n, i0 + batch_size);
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t i = i0; i < i1; ++i) prompts.push_back(encoded[static_cast<size_t>(i)]);
    const auto out = greedy_continue(model, prompts, max_new_tokens, tokenizer.eos(), tokenizer.pad());
    std::vector<RewardRequest> requests;
    for (size_t j = 0; j < out.size(); ++j)
      requests.push_back({fmt::format("val/{}", i0 + static_cast<int64_t>(j)), &val[static_cast<size_t>(i0) + j],
                          tokenizer.decode_response(out[j])});
    for (const RewardResult& r : reward.score(requests)) mine.push_back(r.reward);
  }
  // Every rank's rewards back in example order: rank q's batches are q, q + N, q + 2N, ...
  const std::vector<double> gathered = dist::allgather_values(comm, mine);
  std::vector<double> rewards(static_cast<size_t>(n));
  size_t k = 0;
  for (int q = 0; q < comm.size(); ++q)
    for (int64_t b = q; b < batches; b += comm.size())
      for (int64_t i = b * batch_size; i < std::min(n, (b + 1) * batch_size); ++i) {
        FP8RL_CHECK(k < gathered.size(), "validation: {} rewards gathered for {} examples", gathered.size(), n);
        rewards[static_cast<size_t>(i)] = gathered[k++];
      }
  double total = 0;
  for (double r : rewards) total += r;
  return total / static_cast<double>(n);
}

}  // namespace fp8rl
