// The communicator over MPI. A process joins MPI only when an MPI launcher started it (its
// environment says so); started any other way it is a world of one and never calls MPI, so the
// MPI build behaves exactly like the one without.
#include <mpi.h>

#include <climits>
#include <cstdlib>

#include "core/check.h"
#include "core/communicator.h"

namespace fp8rl::dist {
namespace {

bool joined = false;

bool started_by_mpi_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_SIZE", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

int as_count(int64_t n, const char* what) {
  FP8RL_CHECK(n >= 0 && n <= INT_MAX, "{}: {} elements is more than one MPI call moves", what, n);
  return static_cast<int>(n);
}

std::vector<int> counts_of(const int64_t* v, int n, const char* what) {
  std::vector<int> out(static_cast<size_t>(n));
  for (int q = 0; q < n; ++q) out[static_cast<size_t>(q)] = as_count(v[q], what);
  return out;
}

}  // namespace

Communicator& world() {
  static Communicator w;
  return w;
}

void init_world(int* argc, char*** argv) {
  if (joined || !started_by_mpi_launcher()) return;
  int provided = 0;
  // One thread calls MPI (the kernel pool's threads never do).
  MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided);
  joined = true;
  Communicator& w = world();
  MPI_Comm_rank(MPI_COMM_WORLD, &w.rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &w.size_);
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &local);
  MPI_Comm_size(local, &w.local_size_);
  MPI_Comm_free(&local);
}

void finalize_world() {
  if (!joined) return;
  MPI_Finalize();
  joined = false;
}

bool mpi_available() { return true; }

std::vector<std::vector<std::byte>> Communicator::allgather(std::span<const std::byte> mine) const {
  if (size_ == 1) return {std::vector<std::byte>(mine.begin(), mine.end())};
  const int n = as_count(static_cast<int64_t>(mine.size()), "allgather");
  std::vector<int> sizes(static_cast<size_t>(size_)), offsets(static_cast<size_t>(size_));
  MPI_Allgather(&n, 1, MPI_INT, sizes.data(), 1, MPI_INT, MPI_COMM_WORLD);
  int64_t total = 0;
  for (int q = 0; q < size_; ++q) {
    offsets[static_cast<size_t>(q)] = as_count(total, "allgather");
    total += sizes[static_cast<size_t>(q)];
  }
  std::vector<std::byte> all(static_cast<size_t>(total));
  MPI_Allgatherv(mine.data(), n, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, MPI_COMM_WORLD);
  std::vector<std::vector<std::byte>> out(static_cast<size_t>(size_));
  for (int q = 0; q < size_; ++q) {
    const auto begin = all.begin() + offsets[static_cast<size_t>(q)];
    out[static_cast<size_t>(q)].assign(begin, begin + sizes[static_cast<size_t>(q)]);
  }
  return out;
}

void Communicator::alltoallv(const float* send, const int64_t* send_counts, const int64_t* send_offsets, float* recv,
                             const int64_t* recv_counts, const int64_t* recv_offsets) const {
  const std::vector<int> sc = counts_of(send_counts, size_, "alltoallv"), so = counts_of(send_offsets, size_, "alltoallv"),
                         rc = counts_of(recv_counts, size_, "alltoallv"), ro = counts_of(recv_offsets, size_, "alltoallv");
  MPI_Alltoallv(send, sc.data(), so.data(), MPI_FLOAT, recv, rc.data(), ro.data(), MPI_FLOAT, MPI_COMM_WORLD);
}

void Communicator::allgatherv_in_place(float* data, const int64_t* counts, const int64_t* offsets) const {
  if (size_ == 1) return;
  const std::vector<int> c = counts_of(counts, size_, "allgatherv"), o = counts_of(offsets, size_, "allgatherv");
  MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, c.data(), o.data(), MPI_FLOAT, MPI_COMM_WORLD);
}

void Communicator::gather_to_root(const float* mine, float* all, const int64_t* counts, const int64_t* offsets) const {
  const std::vector<int> c = counts_of(counts, size_, "gather"), o = counts_of(offsets, size_, "gather");
  MPI_Gatherv(mine, c[static_cast<size_t>(rank_)], MPI_FLOAT, all, c.data(), o.data(), MPI_FLOAT, 0, MPI_COMM_WORLD);
}

void Communicator::barrier() const {
  if (size_ > 1) MPI_Barrier(MPI_COMM_WORLD);
}

void Communicator::abort(int code) const {
  if (size_ > 1) MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);
}

}  // namespace fp8rl::dist
