#include "io/metrics_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/check.h"
#include "io/atomic_file.h"
#include "io/input_file.h"

namespace fp8rl {

namespace {

// A metrics line holds a few dozen numbers; a longer one is not this file's.
constexpr uint64_t kMaxMetricsLineBytes = uint64_t{16} << 20;

int open_for_append(const std::filesystem::path& path, int extra_flags) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | extra_flags, 0644);
  FP8RL_REQUIRE(fd >= 0, "metrics file '{}': cannot open for writing: {}", path.string(), std::strerror(errno));
  return fd;
}

}  // namespace

MetricsLog MetricsLog::create(const std::filesystem::path& path) {
  return MetricsLog(path, open_for_append(path, O_TRUNC));
}

MetricsLog MetricsLog::resume(const std::filesystem::path& path, int64_t steps, int64_t* kept_lines) {
  std::string kept;
  int64_t lines = 0;
  if (std::filesystem::exists(path)) {
    InputFile in(path, "metrics file");
    std::string line;
    while (lines < steps && in.read_line(line, kMaxMetricsLineBytes, "16 MiB")) {
      kept += line;
      kept += '\n';
      ++lines;
    }
  }
  write_file_atomic(path, kept);
  if (kept_lines != nullptr) *kept_lines = lines;
  return MetricsLog(path, open_for_append(path, 0));
}

MetricsLog::~MetricsLog() {
  if (fd_ >= 0) ::close(fd_);
}

MetricsLog::MetricsLog(MetricsLog&& other) noexcept : path_(std::move(other.path_)), fd_(other.fd_) { other.fd_ = -1; }

void MetricsLog::append(std::string_view line) {
  std::string bytes(line);
  bytes += '\n';
  const auto fail = [&](const char* what) {
    throw Error(fmt::format("metrics file '{}': {}: {}; the run stops here (its last checkpoint is whole; "
                            "`--resume` continues from it)",
                            path_.string(), what, std::strerror(errno)));
  };
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd_, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      if (n == 0) errno = EIO;
      // A part written before the failure is cut off again by the next --resume.
      fail("cannot write a step line");
    }
    done += static_cast<size_t>(n);
  }
  if (::fdatasync(fd_) != 0 && errno != EINVAL) fail("cannot flush a step line to disk");
}

}  // namespace fp8rl
