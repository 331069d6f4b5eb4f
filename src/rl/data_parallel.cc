#include "rl/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "core/aligned_buffer.h"
#include "core/timer.h"
#include "io/spill_file.h"

namespace fp8rl::dist {
namespace {

// Floats received per all-to-all (16 MiB): each rank's range of the gradient moves in pieces of
// kExchangeFloats / N.
constexpr int64_t kExchangeFloats = int64_t{1} << 22;
// Floats of a moment gathered to rank 0 at a time for a checkpoint (4 MiB).
constexpr int64_t kGatherBand = int64_t{1} << 20;

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

ParamRange optimizer_range(int64_t numel, int rank, int size) {
  const int64_t chunks = (numel + kAdamWChunk - 1) / kAdamWChunk;
  const int64_t c0 = chunks * rank / size, c1 = chunks * (rank + 1) / size;
  return {std::min(numel, c0 * kAdamWChunk), std::min(numel, c1 * kAdamWChunk)};
}

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
  std::vector<ParamRange> ranges;
  int64_t longest = 0;
  for (int q = 0; q < N; ++q) {
    ranges.push_back(optimizer_range(numel, q, N));
    longest = std::max(longest, ranges.back().end - ranges.back().begin);
  }
  const int64_t lo = ranges[static_cast<size_t>(rank)].begin, hi = ranges[static_cast<size_t>(rank)].end;
  // Each rank's range moves in pieces of at most `piece` floats, one all-to-all per piece.
  const int64_t piece = std::min(std::max<int64_t>(1, longest), std::max<int64_t>(kAdamWChunk, kExchangeFloats / N));
  const int64_t pieces = (longest + piece - 1) / piece;
  AlignedBuffer<float> owned(static_cast<size_t>(hi - lo));  // this rank's range of the running sum, from zero
  AlignedBuffer<float> recv(static_cast<size_t>(piece * N));
  std::vector<int64_t> send_counts(static_cast<size_t>(N)), send_offsets(static_cast<size_t>(N));
  std::vector<int64_t> recv_counts(static_cast<size_t>(N)), recv_offsets(static_cast<size_t>(N));
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
    for (int64_t p = 0; p < pieces; ++p) {
      for (int q = 0; q < N; ++q) {  // piece p of rank q's range goes to rank q
        const ParamRange& r = ranges[static_cast<size_t>(q)];
        const int64_t b = std::min(r.end, r.begin + p * piece);
        send_offsets[static_cast<size_t>(q)] = b;
        send_counts[static_cast<size_t>(q)] = std::min(r.end, b + piece) - b;
      }
      const int64_t b = std::min(hi, lo + p * piece), n = std::min(hi, b + piece) - b;
      for (int q = 0; q < N; ++q) {
        recv_offsets[static_cast<size_t>(q)] = q * piece;
        recv_counts[static_cast<size_t>(q)] = n;
      }
      comm.alltoallv(grads, send_counts.data(), send_offsets.data(), recv.data(), recv_counts.data(), recv_offsets.data());
      float* own = owned.data() + (b - lo);
      for (int q = 0; q < N && j * N + q < count; ++q) {  // one process's additions, in its order
        const float* term = recv.data() + q * piece;
        for (int64_t i = 0; i < n; ++i) own[i] += term[i];
        if (n > 0) add_rows_in_range(rows[static_cast<size_t>(q)], embed, C, b, b + n, own);
      }
    }
    result.communication_seconds += timer.seconds();
  }
  std::copy(owned.data(), owned.data() + (hi - lo), model.grads() + lo);
  return result;
}

double optimizer_step(const Communicator& comm, AdamW& optimizer, Transformer& model, double lr, double* seconds) {
  if (comm.size() == 1) return optimizer.step(model.params(), model.grads(), lr);
  Timer timer;
  // The global norm: every shard's per-chunk sums of squares, added in chunk (= rank) order.
  double sum = 0.0;
  for (double s : allgather_values(comm, optimizer.grad_square_sums(model.grads()))) sum += s;
  double waited = timer.seconds();
  const double norm = optimizer.step_with_norm(model.params(), model.grads(), lr, std::sqrt(sum));
  if (std::isfinite(norm)) {  // every rank's updated range of the masters, to every rank
    timer.reset();
    std::vector<int64_t> counts, offsets;
    for (int q = 0; q < comm.size(); ++q) {
      const ParamRange r = optimizer_range(model.num_params(), q, comm.size());
      offsets.push_back(r.begin);
      counts.push_back(r.end - r.begin);
    }
    comm.allgatherv_in_place(model.params(), counts.data(), offsets.data());
    waited += timer.seconds();
  }
  if (seconds != nullptr) *seconds += waited;
  return norm;
}

void save_checkpoint(const Communicator& comm, const std::filesystem::path& dir, const Transformer& model,
                     const AdamW& optimizer, const nlohmann::json& trainer_state,
                     const std::filesystem::path& model_source) {
  if (comm.size() == 1) {
    fp8rl::save_checkpoint(dir, model, &optimizer, trainer_state, model_source);
    return;
  }
  // Rank 0 gathers every shard's moments into a whole optimizer for the file, writes, frees it.
  // Its moments live where the shards' do: in a spill file when they are offloaded, so that no
  // process ever holds them whole in memory.
  std::optional<AdamW> whole;
  if (comm.is_root()) {
    whole.emplace(model.layout(), optimizer.config(), ParamRange{},
                  optimizer.moments_offloaded() ? spill_directory_for(dir) : std::filesystem::path{});
    whole->set_steps_taken(optimizer.steps_taken());
  }
  // Band by band of the flat parameter array: each rank sends the part of the band in its shard.
  const int64_t n = model.num_params();
  std::vector<ParamRange> shards;
  for (int q = 0; q < comm.size(); ++q) shards.push_back(optimizer_range(n, q, comm.size()));
  std::vector<float> part(static_cast<size_t>(kGatherBand)), band(comm.is_root() ? part.size() : 0);
  std::vector<int64_t> counts(shards.size()), offsets(shards.size());
  const auto me = static_cast<size_t>(comm.rank());
  for (const Moment moment : {Moment::kFirst, Moment::kSecond}) {
    for (int64_t lo = 0; lo < n; lo += kGatherBand) {
      const int64_t hi = std::min(n, lo + kGatherBand);
      for (size_t q = 0; q < shards.size(); ++q) {
        const int64_t from = std::max(lo, shards[q].begin), to = std::min(hi, shards[q].end);
        counts[q] = std::max<int64_t>(0, to - from);
        offsets[q] = counts[q] > 0 ? from - lo : 0;
      }
      if (counts[me] > 0) optimizer.read_moment(moment, lo + offsets[me], counts[me], part.data());
      comm.gather_to_root(part.data(), band.data(), counts.data(), offsets.data());
      if (whole) whole->write_moment(moment, lo, hi - lo, band.data());
    }
  }
  if (comm.is_root()) fp8rl::save_checkpoint(dir, model, &*whole, trainer_state, model_source);
  comm.barrier();  // the checkpoint is whole before any rank goes on
}

std::vector<GeneratedSequence> allgather_sequences(const Communicator& comm, std::vector<GeneratedSequence> mine) {
  if (comm.size() == 1) return mine;
  // Per sequence: prompt index, sample index, finish reason, length, routing length, observation
  // mask length, turns, then tokens, log-probs, (MoE models) the routing and (multi-turn) the
  // observation mask.
  std::vector<std::byte> bytes;
  const auto put = [&](const void* src, size_t n) {
    const auto* p = static_cast<const std::byte*>(src);
    bytes.insert(bytes.end(), p, p + n);
  };
  for (const GeneratedSequence& s : mine) {
    const int64_t head[7] = {s.prompt_index, s.sample_index, static_cast<int64_t>(s.finish),
                             static_cast<int64_t>(s.tokens.size()), static_cast<int64_t>(s.routing.size()),
                             static_cast<int64_t>(s.observation.size()), s.turns};
    FP8RL_CHECK(s.logprobs.size() == s.tokens.size(), "allgather_sequences: {} log-probs for {} tokens",
                s.logprobs.size(), s.tokens.size());
    put(head, sizeof(head));
    put(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
    put(s.logprobs.data(), s.logprobs.size() * sizeof(float));
    put(s.routing.data(), s.routing.size() * sizeof(uint16_t));
    put(s.observation.data(), s.observation.size());
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
      int64_t head[7];
      get(head, sizeof(head));
      GeneratedSequence s;
      s.prompt_index = head[0];
      s.sample_index = head[1];
      s.finish = static_cast<FinishReason>(head[2]);
      s.tokens.resize(static_cast<size_t>(head[3]));
      s.logprobs.resize(static_cast<size_t>(head[3]));
      get(s.tokens.data(), s.tokens.size() * sizeof(int32_t));
      get(s.logprobs.data(), s.logprobs.size() * sizeof(float));
      s.routing.resize(static_cast<size_t>(head[4]));
      get(s.routing.data(), s.routing.size() * sizeof(uint16_t));
      s.observation.resize(static_cast<size_t>(head[5]));
      get(s.observation.data(), s.observation.size());
      s.turns = head[6];
      all.push_back(std::move(s));
    }
  }
  return all;
}

}  // namespace fp8rl::dist
