// An exclusive lock on a run directory, so that two jobs (or a --resume of a running job) never
// write the same metrics and checkpoint. An advisory flock(2) on RUN_DIR/.lock: the kernel
// releases it when the process ends, however it ends, so a crashed run never leaves the directory
// locked. The file holds the holder's pid, for the error message of the next one.
#pragma once

#include <filesystem>

namespace fp8rl {

class RunDirectoryLock {
 public:
  // Creates `dir` if needed and locks it; throws Error naming the holder's pid when another
  // process holds it.
  explicit RunDirectoryLock(const std::filesystem::path& dir);
  ~RunDirectoryLock();
  RunDirectoryLock(const RunDirectoryLock&) = delete;
  RunDirectoryLock& operator=(const RunDirectoryLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace fp8rl
