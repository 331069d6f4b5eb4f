// Data parallelism: the micro-batches of one optimizer step spread over the world's ranks, with
// the gradient one process would get, bit for bit (docs/distributed.md).
//
// One process runs micro-batches 0, 1, ... in order, and by Transformer::backward's contract
// each adds to the gradient one dense term per element (formed from zero), then, on the rows of
// its tokens, an embedding term: the step's gradient is that fold, in micro-batch order. Here
// micro-batch k runs on rank k % N, so in round j the ranks hold micro-batches jN .. jN + N - 1,
// consecutive in that order. Each round, every rank computes its micro-batch's terms (into
// zeroed gradients; its embedding term kept apart), the dense terms are exchanged so that rank r
// receives its range of every rank's (an all-to-all), and rank r folds, for q = 0 .. N - 1,
// rank q's dense term and then its embedding rows into its range of the running sum: the
// additions one process makes, in its order. No addition happens inside MPI, so neither N nor
// the MPI library's algorithms change a bit.
//
// Rank r's range is also its optimizer shard (ZeRO stage 1): it keeps the AdamW moments of that
// range only, updates that range of the FP32 masters, and the updated ranges are all-gathered,
// so every rank ends the step with the same masters and re-quantizes its own weights from them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <type_traits>
#include <vector>

#include "core/check.h"
#include "generation/engine.h"
#include "model/checkpoint.h"
#include "model/optimizer.h"
#include "model/transformer.h"
#include "core/communicator.h"

namespace fp8rl::dist {

struct AccumulateResult {
  // Every micro-batch's bytes from `run`, in micro-batch order, on every rank.
  std::vector<std::vector<std::byte>> outputs;
  double communication_seconds = 0;  // in collectives (waiting for slower ranks included)
};

// The elements of the flat parameter array rank `rank` of `size` reduces and updates: whole
// kAdamWChunk chunks, contiguous, in rank order.
ParamRange optimizer_range(int64_t numel, int rank, int size);

// Runs micro-batches [0, count) of one optimizer step on the ranks of `comm` and leaves their
// summed gradient in model.grads() over this rank's optimizer_range (alone: all of it; the rest
// is scratch under several ranks). run(k, rows) runs the forward and
// backward(dlogprobs, rows) of micro-batch k on this rank and returns what the other ranks need
// of it (its metric sums, say). Alone (one rank), it is zero_grads() and run(k, nullptr) for
// every k, in order.
AccumulateResult accumulate_gradients(const Communicator& comm, Transformer& model, int64_t count,
                                      const std::function<std::vector<std::byte>(int64_t k, EmbeddingRowGrads* rows)>& run);

// AdamW's step on the rank's shard (`optimizer` was made with this rank's optimizer_range, or
// whole alone): the global norm from every shard's sums of squares in order, the update, then
// the updated masters all-gathered. Returns the pre-clip norm (non-finite: nothing changed).
// Adds the time spent in collectives to *seconds when given.
double optimizer_step(const Communicator& comm, AdamW& optimizer, Transformer& model, double lr,
                      double* seconds = nullptr);

// The checkpoint of a data-parallel run, in the usual layout: rank 0 gathers the shards' moments
// a band at a time into a whole optimizer (in memory for the time of the write, or in a spill file
// by `dir` when the shards' moments are offloaded) and writes; every rank returns once the
// checkpoint is whole. Alone, fp8rl::save_checkpoint.
void save_checkpoint(const Communicator& comm, const std::filesystem::path& dir, const Transformer& model,
                     const AdamW& optimizer, const nlohmann::json& trainer_state,
                     const std::filesystem::path& model_source);

// The micro-batches of `count` that rank `rank` of `size` runs: k with k % size == rank.
inline bool runs_micro_batch(int64_t k, int rank, int size) { return k % size == rank; }

// [begin, end) of the `count` items (prompts, examples) that rank `rank` of `size` handles:
// contiguous shares in rank order, sizes differing by at most one.
struct Share {
  int64_t begin = 0, end = 0;
};
inline Share share_of(int64_t count, int rank, int size) {
  return {count * rank / size, count * (rank + 1) / size};
}

// Bytes of a trivially copyable value (or of a vector of them) and back: what ranks exchange.
template <typename T>
std::vector<std::byte> to_bytes(const T& value) {
  static_assert(std::is_trivially_copyable_v<T>);
  const auto* p = reinterpret_cast<const std::byte*>(&value);
  return std::vector<std::byte>(p, p + sizeof(T));
}
template <typename T>
T from_bytes(const std::vector<std::byte>& bytes) {
  static_assert(std::is_trivially_copyable_v<T>);
  FP8RL_CHECK(bytes.size() == sizeof(T), "data parallel: {} bytes received where {} were expected", bytes.size(),
              sizeof(T));
  T value;
  std::memcpy(&value, bytes.data(), sizeof(T));
  return value;
}

// Every rank's values, concatenated in rank order.
template <typename T>
std::vector<T> allgather_values(const Communicator& comm, const std::vector<T>& mine) {
  static_assert(std::is_trivially_copyable_v<T>);
  if (comm.size() == 1) return mine;
  const auto* p = reinterpret_cast<const std::byte*>(mine.data());
  std::vector<T> all;
  for (const std::vector<std::byte>& bytes : comm.allgather({p, mine.size() * sizeof(T)})) {
    FP8RL_CHECK(bytes.size() % sizeof(T) == 0, "data parallel: {} bytes is not a whole number of values", bytes.size());
    const size_t n = bytes.size() / sizeof(T);
    all.resize(all.size() + n);
    if (n != 0) std::memcpy(all.data() + all.size() - n, bytes.data(), bytes.size());
  }
  return all;
}

// Every rank's generated sequences (tokens and log-probs), concatenated in rank order.
std::vector<GeneratedSequence> allgather_sequences(const Communicator& comm, std::vector<GeneratedSequence> mine);

}  // namespace fp8rl::dist
