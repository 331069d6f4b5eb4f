#include "io/spill_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/check.h"

namespace fp8rl {

namespace fs = std::filesystem;

fs::path spill_directory_for(const fs::path& wanted) {
  std::error_code ec;
  for (fs::path dir = fs::absolute(wanted, ec); !ec && !dir.empty(); dir = dir.parent_path()) {
    if (fs::is_directory(dir, ec)) return dir;
    if (dir == dir.root_path()) break;
  }
  return fs::temp_directory_path();
}

SpillFile::SpillFile(const std::filesystem::path& dir) : dir_(dir) {
  fd_ = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd_ < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    // No O_TMPFILE on this file system: a named file, removed before it is used.
    std::string name = (dir / ".spill-XXXXXX").string();
    fd_ = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd_ >= 0) ::unlink(name.c_str());
  }
  FP8RL_REQUIRE(fd_ >= 0, "cannot create a spill file in '{}': {}", dir.string(), std::strerror(errno));
}

SpillFile::~SpillFile() {
  if (fd_ >= 0) ::close(fd_);
}

namespace {

// Calls io(offset, done) (a pread or pwrite of what is left from `done` on) until `bytes` are done.
template <typename Io>
void transfer_all(const std::filesystem::path& dir, const char* verb, int64_t offset, size_t bytes, const char* short_io,
           Io io) {
  for (size_t done = 0; done < bytes;) {
    const ssize_t n = io(static_cast<off_t>(offset + static_cast<int64_t>(done)), done);
    if (n < 0 && errno == EINTR) continue;
    FP8RL_REQUIRE(n > 0, "spill file in '{}': {} {} bytes at offset {} failed: {}", dir.string(), verb, bytes - done,
                  offset + static_cast<int64_t>(done), n < 0 ? std::strerror(errno) : short_io);
    done += static_cast<size_t>(n);
  }
}

}  // namespace

void SpillFile::write(int64_t offset, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  transfer_all(dir_, "writing", offset, bytes, "no progress",
        [&](off_t at, size_t done) { return ::pwrite(fd_, p + done, bytes - done, at); });
}

void SpillFile::read(int64_t offset, void* data, size_t bytes) const {
  char* p = static_cast<char*>(data);
  transfer_all(dir_, "reading", offset, bytes, "the file ends before them",
        [&](off_t at, size_t done) { return ::pread(fd_, p + done, bytes - done, at); });
}

void SpillFile::resize(int64_t bytes) {
  int rc;
  do rc = ::ftruncate(fd_, static_cast<off_t>(bytes));
  while (rc != 0 && errno == EINTR);
  FP8RL_REQUIRE(rc == 0, "spill file in '{}': cannot make it {} bytes long: {}", dir_.string(), bytes,
                std::strerror(errno));
}

}  // namespace fp8rl
