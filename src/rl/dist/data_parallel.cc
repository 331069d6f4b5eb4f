#include "rl/dist/data_parallel.h"

#include <algorithm>

#include "core/aligned_buffer.h"
#include "core/timer.h"

namespace fp8rl::dist {
namespace {

// Floats per all-to-all: the gradient moves in chunks of about this many (16 MiB), each cut into
// one equal shard per rank.
constexpr int64_t kChunkFloats = int64_t{1} << 22;

// One rank's message of a round: its micro-batch's `run` bytes and embedding term.
std::vector<std::byte> pack_round(const std::vector<std::byte>& output, const EmbeddingRowGrads& rows) {
  const uint64_t sizes[3] = {output.size(), rows.tokens.size(), rows.rows.size()};
  std::vector<std::byte> out(sizeof(sizes) + output.size() + rows.tokens.size() * sizeof(int32_t) +
                             rows.rows.size() * sizeof(float));
  std::byte* p = out.data();
  const auto put = [&](const void* src, size_t n) {
    if (n != 0) std::memcpy(p, src, n);
    p += n;
  };
  put(sizes, sizeof(sizes));
  put(output.data(), output.size());
  put(rows.tokens.data(), rows.tokens.size() * sizeof(int32_t));
  put(rows.rows.data(), rows.rows.size() * sizeof(float));
  return out;
}

void unpack_round(const std::vector<std::byte>& in, std::vector<std::byte>* output, EmbeddingRowGrads* rows) {
  uint64_t sizes[3];
  FP8RL_CHECK(in.size() >= sizeof(sizes), "data parallel: a round message of {} bytes", in.size());
  std::memcpy(sizes, in.data(), sizeof(sizes));
  FP8RL_CHECK(in.size() == sizeof(sizes) + sizes[0] + sizes[1] * sizeof(int32_t) + sizes[2] * sizeof(float),
              "data parallel: a round message of {} bytes does not match its header", in.size());
  const std::byte* p = in.data() + sizeof(sizes);
  output->assign(p, p + sizes[0]);
  p += sizes[0];
  rows->tokens.resize(sizes[1]);
  if (sizes[1] != 0) std::memcpy(rows->tokens.data(), p, sizes[1] * sizeof(int32_t));
  p += sizes[1] * sizeof(int32_t);
  rows->rows.resize(sizes[2]);
  if (sizes[2] != 0) std::memcpy(rows->rows.data(), p, sizes[2] * sizeof(float));
}

// Adds the part of `rows` (an embedding term; the embedding starts at element `embed` of the
// gradient, rows of C) that falls in [lo, hi) of the gradient to owned[i - lo].
void add_rows_in_range(const EmbeddingRowGrads& rows, int64_t embed, int64_t C, int64_t lo, int64_t hi, float* owned) {
  for (size_t k = 0; k < rows.tokens.size(); ++k) {
    const int64_t first = embed + static_cast<int64_t>(rows.tokens[k]) * C;
    const int64_t b = std::max(first, lo), e = std::min(first + C, hi);
    const float* sum = rows.rows.data() + static_cast<int64_t>(k) * C;
    for (int64_t i = b; i < e; ++i) owned[i - lo] += sum[i - first];
  }
}

}  // namespace

AccumulateResult accumulate_gradients(const Communicator& comm, Transformer& model, int64_t count,
                                      const std::function<std::vector<std::byte>(int64_t, EmbeddingRowGrads*)>& run) {
  AccumulateResult result;
  result.outputs.resize(static_cast<size_t>(count));
  if (comm.size() == 1) {
    model.zero_grads();
    for (int64_t k = 0; k < count; ++k) result.outputs[static_cast<size_t>(k)] = run(k, nullptr);
    return result;
  }
  const int N = comm.size(), rank = comm.rank();
  const int64_t numel = model.num_params(), C = model.config().d_model;
  const int64_t shard = (kChunkFloats + N - 1) / N, chunk = shard * N, chunks = (numel + chunk - 1) / chunk;
  AlignedBuffer<float> owned(static_cast<size_t>(chunks * shard));  // this rank's shard of every chunk, from zero
  AlignedBuffer<float> recv(static_cast<size_t>(chunk)), padded(static_cast<size_t>(chunk));
  const int64_t rounds = (count + N - 1) / N;
  Timer timer;
  for (int64_t j = 0; j < rounds; ++j) {
    const int64_t mine = j * N + rank;
    model.zero_grads();
    EmbeddingRowGrads my_rows;
    std::vector<std::byte> message;
    if (mine < count) message = pack_round(run(mine, &my_rows), my_rows);
    timer.reset();
    const std::vector<std::vector<std::byte>> messages = comm.allgather(message);
    std::vector<EmbeddingRowGrads> rows(static_cast<size_t>(N));
    for (int q = 0; q < N && j * N + q < count; ++q)
      unpack_round(messages[static_cast<size_t>(q)], &result.outputs[static_cast<size_t>(j * N + q)],
                   &rows[static_cast<size_t>(q)]);
    const float* grads = model.grads();
    const int64_t embed = model.weight_grads().embed - grads;
    for (int64_t c = 0; c < chunks; ++c) {
      const int64_t base = c * chunk, n = std::min(chunk, numel - base);
      const float* send = grads + base;
      if (n < chunk) {  // the last chunk, padded with zeros to N whole shards
        std::copy(send, send + n, padded.data());
        std::fill(padded.data() + n, padded.data() + chunk, 0.0f);
        send = padded.data();
      }
      comm.alltoall(send, recv.data(), shard);
      const int64_t lo = base + rank * shard, hi = std::min(lo + shard, numel);
      float* own = owned.data() + c * shard;
      for (int q = 0; q < N && j * N + q < count; ++q) {  // one process's additions, in its order
        const float* term = recv.data() + q * shard;
        for (int64_t i = 0; i < hi - lo; ++i) own[i] += term[i];
        if (lo < hi) add_rows_in_range(rows[static_cast<size_t>(q)], embed, C, lo, hi, own);
      }
    }
    result.communication_seconds += timer.seconds();
  }
  // Every rank's shards, into every rank's gradient.
  timer.reset();
  float* grads = model.grads();
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t base = c * chunk, n = std::min(chunk, numel - base);
    float* dst = n < chunk ? padded.data() : grads + base;
    comm.allgather(owned.data() + c * shard, dst, shard);
    if (n < chunk) std::copy(padded.data(), padded.data() + n, grads + base);
  }
  result.communication_seconds += timer.seconds();
  return result;
}

std::vector<GeneratedSequence> allgather_sequences(const Communicator& comm, std::vector<GeneratedSequence> mine) {
  if (comm.size() == 1) return mine;
  // Per sequence: prompt index, sample index, finish reason, length, then tokens and log-probs.
  std::vector<std::byte> bytes;
  const auto put = [&](const void* src, size_t n) {
    const auto* p = static_cast<const std::byte*>(src);
    bytes.insert(bytes.end(), p, p + n);
  };
  for (const GeneratedSequence& s : mine) {
    const int64_t head[4] = {s.prompt_index, s.sample_index, static_cast<int64_t>(s.finish),
                             static_cast<int64_t>(s.tokens.size())};
    FP8RL_CHECK(s.logprobs.size() == s.tokens.size(), "allgather_sequences: {} log-probs for {} tokens",
                s.logprobs.size(), s.tokens.size());
    put(head, sizeof(head));
    put(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
    put(s.logprobs.data(), s.logprobs.size() * sizeof(float));
  }
  std::vector<GeneratedSequence> all;
  for (const std::vector<std::byte>& in : comm.allgather(bytes)) {
    size_t at = 0;
    const auto get = [&](void* dst, size_t n) {
      FP8RL_CHECK(at + n <= in.size(), "allgather_sequences: a message of {} bytes ends early", in.size());
      if (n != 0) std::memcpy(dst, in.data() + at, n);
      at += n;
    };
    while (at < in.size()) {
      int64_t head[4];
      get(head, sizeof(head));
      GeneratedSequence s;
      s.prompt_index = head[0];
      s.sample_index = head[1];
      s.finish = static_cast<FinishReason>(head[2]);
      s.tokens.resize(static_cast<size_t>(head[3]));
      s.logprobs.resize(static_cast<size_t>(head[3]));
      get(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
      get(s.logprobs.data(), s.logprobs.size() * sizeof(float));
      all.push_back(std::move(s));
    }
  }
  return all;
}

}  // namespace fp8rl::dist
