#include "io/run_lock.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/check.h"

namespace fp8rl {

namespace fs = std::filesystem;

RunDirectoryLock::RunDirectoryLock(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FP8RL_REQUIRE(!ec, "run directory '{}': cannot create it: {}", dir.string(), ec.message());
  const fs::path path = dir / ".lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  FP8RL_REQUIRE(fd_ >= 0, "run directory '{}': cannot open its lock file '{}': {}", dir.string(), path.string(),
              std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    char holder[32] = {};
    const ssize_t n = ::pread(fd_, holder, sizeof(holder) - 1, 0);
    ::close(fd_);
    fd_ = -1;
    // A user's situation, not a broken contract: the message alone, in the user's words.
    if (error == EWOULDBLOCK)
      throw Error(fmt::format(
          "run directory '{}' is in use by process {} (another fp8rl train or sft): wait for it to end, or choose "
          "another logger.log_dir",
          dir.string(), n > 0 ? std::string(holder, static_cast<size_t>(n)) : std::string("(unknown)")));
    throw Error(fmt::format("run directory '{}': cannot lock '{}': {}", dir.string(), path.string(), std::strerror(error)));
  }
  // The pid is only for the next process's message: failing to write it leaves the lock held.
  const std::string pid = std::to_string(::getpid());
  [[maybe_unused]] const bool written =
      ::ftruncate(fd_, 0) == 0 && ::pwrite(fd_, pid.data(), pid.size(), 0) == static_cast<ssize_t>(pid.size());
}

RunDirectoryLock::~RunDirectoryLock() {
  if (fd_ >= 0) ::close(fd_);  // releases the lock
}

}  // namespace fp8rl
