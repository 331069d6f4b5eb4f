// The communicator of a build without MPI: always a world of one process.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/communicator.h"

namespace fp8rl::dist {

Communicator& world() {
  static Communicator w;
  return w;
}
void init_world(int*, char***) {
  // Started by an MPI launcher as one of several processes: each would run the whole job alone.
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* size = std::getenv(name);
    if (size != nullptr && std::atoi(size) > 1) {
      std::fprintf(stderr,
                   "fp8rl: error: started by mpirun as one of %s processes, but this build has no MPI support "
                   "(install libopenmpi-dev, then rebuild: scripts/build.sh)\n",
                   size);
      std::exit(1);
    }
  }
}
void finalize_world() {}
bool mpi_available() { return false; }

std::vector<std::vector<std::byte>> Communicator::allgather(std::span<const std::byte> mine) const {
  return {std::vector<std::byte>(mine.begin(), mine.end())};
}
void Communicator::alltoallv(const float* send, const int64_t* send_counts, const int64_t* send_offsets, float* recv,
                             const int64_t*, const int64_t* recv_offsets) const {
  std::copy(send + send_offsets[0], send + send_offsets[0] + send_counts[0], recv + recv_offsets[0]);
}
void Communicator::allgatherv_in_place(float*, const int64_t*, const int64_t*) const {}
void Communicator::gather_to_root(const float* mine, float* all, const int64_t* counts, const int64_t* offsets) const {
  std::copy(mine, mine + counts[0], all + offsets[0]);
}
void Communicator::barrier() const {}
void Communicator::abort(int code) const { std::exit(code); }

}  // namespace fp8rl::dist
