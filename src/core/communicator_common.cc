// The parts of the communicator that do not depend on the transport.
#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <thread>

#include "core/communicator.h"

namespace fp8rl::dist {

std::string Communicator::label() const { return size_ > 1 ? fmt::format("rank {}/{}: ", rank_, size_) : ""; }

int default_threads_per_process(const Communicator& comm) {
  cpu_set_t mask;
  const int online = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  int cpus = online;
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) cpus = std::max(1, CPU_COUNT(&mask));
  // A launcher that binds each process (mpirun's default up to one process per core) gives it
  // its own CPUs; one that does not (--oversubscribe, --bind-to none) leaves every process the
  // whole machine, to be shared.
  if (cpus >= online && comm.local_size() > 1) cpus = std::max(1, cpus / comm.local_size());
  return cpus;
}

}  // namespace fp8rl::dist
