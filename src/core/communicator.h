// The processes of a data-parallel run and the few collectives fp8rl needs (docs/distributed.md).
//
// One implementation per build: communicator_mpi.cc over MPI (Open MPI, when CMake found it) or
// communicator_local.cc, a single process. A process started by `mpirun` joins its job's world;
// any other is a world of one, so the same binary runs alone or under MPI. Every collective is
// called by every rank in the same order, and its result never depends on the MPI library's
// choice of algorithm: nothing here adds numbers (callers fold what they gather, in rank order).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp8rl::dist {

class Communicator {
 public:
  int rank() const { return rank_; }
  int size() const { return size_; }
  bool is_root() const { return rank_ == 0; }
  // Processes of this world on this machine (threads are shared among them).
  int local_size() const { return local_size_; }

  // Every rank's bytes, in rank order (sizes may differ).
  std::vector<std::vector<std::byte>> allgather(std::span<const std::byte> mine) const;
  // Variable blocks: rank q sends send[send_offsets[q] .. + send_counts[q]) to rank q and
  // receives rank q's block into recv[recv_offsets[q] .. + recv_counts[q]).
  void alltoallv(const float* send, const int64_t* send_counts, const int64_t* send_offsets, float* recv,
                 const int64_t* recv_counts, const int64_t* recv_offsets) const;
  // In place: rank q's block data[offsets[q] .. + counts[q]) reaches every rank.
  void allgatherv_in_place(float* data, const int64_t* counts, const int64_t* offsets) const;
  // Rank q's block mine[0 .. counts[q]) into all[offsets[q] ..] on rank 0 (`all` unused elsewhere).
  void gather_to_root(const float* mine, float* all, const int64_t* counts, const int64_t* offsets) const;
  void barrier() const;
  // Ends every process of the job with `code` (after an error on one rank).
  [[noreturn]] void abort(int code) const;

  // "rank R/N: " in a world of several processes, "" alone: a prefix for messages.
  std::string label() const;

 private:
  friend Communicator& world();
  friend void init_world(int* argc, char*** argv);
  int rank_ = 0, size_ = 1, local_size_ = 1;
};

// Joins the job's world when started by an MPI launcher (else a world of one). Call once, first
// thing in main(); a second call does nothing.
void init_world(int* argc, char*** argv);
// Leaves it (MPI_Finalize); a no-op alone.
void finalize_world();
Communicator& world();
// True when this build can join an MPI job.
bool mpi_available();

// The kernel threads each process should use when the user set none: the CPUs of its affinity
// mask, divided among the world's processes on this machine when they all share one mask.
int default_threads_per_process(const Communicator& comm);

}  // namespace fp8rl::dist
