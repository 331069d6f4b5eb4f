#include "io/atomic_file.h"

#include <fcntl.h>
#include <stdio.h>  // renameat2, RENAME_EXCHANGE (glibc, _GNU_SOURCE)
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "core/check.h"

namespace fs = std::filesystem;

namespace fp8rl {
namespace {

std::string errno_text(int err) { return std::strerror(err); }

// The directory a path lives in ("." for a bare file name), for temporaries and the final fsync.
fs::path parent_of(const fs::path& path) {
  fs::path parent = path.parent_path();
  return parent.empty() ? fs::path(".") : parent;
}

// fsync a directory so that a rename inside it survives a crash. Best effort: some file systems
// refuse fsync on directories, which is not an error worth failing a checkpoint for.
void fsync_directory(const fs::path& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}

void fsync_path(const fs::path& path, const fs::path& target) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("publishing '{}': cannot open '{}' to flush it: {}", target.string(), path.string(), errno_text(errno)));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0 && err != EINVAL)  // EINVAL: this kind of file cannot be synced; nothing to flush
    throw Error(fmt::format("publishing '{}': fsync of '{}' failed: {}", target.string(), path.string(), errno_text(err)));
}

}  // namespace

AtomicFileWriter::AtomicFileWriter(fs::path path) : path_(std::move(path)) {
  FP8RL_CHECK(!path_.filename().empty(), "atomic write needs a file name, got '{}'", path_.string());
  std::string tmpl = (parent_of(path_) / ("." + path_.filename().string() + ".tmp-XXXXXX")).string();
  fd_ = ::mkostemp(tmpl.data(), O_CLOEXEC);
  if (fd_ < 0)
    throw Error(fmt::format("cannot write '{}': cannot create a temporary file in '{}': {}", path_.string(),
                            parent_of(path_).string(), errno_text(errno)));
  tmp_path_ = tmpl;
  ::fchmod(fd_, 0644);  // mkstemp makes 0600; published files are ordinary readable files
}

AtomicFileWriter::AtomicFileWriter(AtomicFileWriter&& other) noexcept
    : path_(std::move(other.path_)), tmp_path_(std::move(other.tmp_path_)), fd_(std::exchange(other.fd_, -1)) {}

AtomicFileWriter::~AtomicFileWriter() { discard(); }

void AtomicFileWriter::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_path_.c_str());
}

void AtomicFileWriter::write(const void* data, size_t bytes) {
  FP8RL_CHECK(fd_ >= 0, "write to '{}' after commit or failure", path_.string());
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      discard();
      throw Error(fmt::format("cannot write '{}': {}", path_.string(), errno_text(err)));
    }
    p += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFileWriter::commit() {
  FP8RL_CHECK(fd_ >= 0, "commit of '{}' after commit or failure", path_.string());
  if (::fsync(fd_) != 0) {
    const int err = errno;
    discard();
    throw Error(fmt::format("cannot write '{}': fsync failed: {}", path_.string(), errno_text(err)));
  }
  if (::close(fd_) != 0) {
    const int err = errno;
    fd_ = -1;
    ::unlink(tmp_path_.c_str());
    throw Error(fmt::format("cannot write '{}': close failed: {}", path_.string(), errno_text(err)));
  }
  fd_ = -1;
  if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_path_.c_str());
    throw Error(fmt::format("cannot write '{}': rename from '{}' failed: {}", path_.string(), tmp_path_.string(),
                            errno_text(err)));
  }
  fsync_directory(parent_of(path_));
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  AtomicFileWriter writer(path);
  writer.write(bytes);
  writer.commit();
}

void publish_directory_atomic(const fs::path& dir, const std::function<void(const fs::path& tmp_dir)>& fill) {
  const fs::path clean = dir.lexically_normal();  // "a/b/" -> "a/b/": strip the trailing slash
  const fs::path target = clean.filename().empty() ? clean.parent_path() : clean;
  FP8RL_CHECK(!target.filename().empty(), "publish_directory_atomic needs a directory name, got '{}'", dir.string());
  std::string tmpl = target.string() + ".tmp-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr)
    throw Error(fmt::format("cannot write directory '{}': cannot create '{}': {}", target.string(), tmpl,
                            errno_text(errno)));
  const fs::path tmp(tmpl);
  ::chmod(tmp.c_str(), 0755);
  try {
    fill(tmp);
    // Flush every file's data and every directory entry before the directory becomes visible.
    for (const auto& entry : fs::recursive_directory_iterator(tmp)) {
      if (entry.is_regular_file() || entry.is_directory()) fsync_path(entry.path(), target);
    }
    fsync_path(tmp, target);

    if (::rename(tmp.c_str(), target.c_str()) != 0) {
      if (errno != EEXIST && errno != ENOTEMPTY && errno != EISDIR && errno != ENOTDIR)
        throw Error(fmt::format("cannot write directory '{}': rename from '{}' failed: {}", target.string(),
                                tmp.string(), errno_text(errno)));
      // The target exists. Swap the two names in one step, so that `target` is never missing;
      // the old contents end up under the temporary name and are removed below.
      if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, target.c_str(), RENAME_EXCHANGE) != 0) {
        if (errno != EINVAL && errno != ENOSYS)
          throw Error(fmt::format("cannot replace directory '{}': {}", target.string(), errno_text(errno)));
        // The file system cannot exchange: move the old one aside first (a short window in which
        // `target` is missing, but never incomplete).
        std::string old_tmpl = target.string() + ".tmp-XXXXXX";
        if (::mkdtemp(old_tmpl.data()) == nullptr || ::rename(target.c_str(), old_tmpl.c_str()) != 0)
          throw Error(fmt::format("cannot replace directory '{}': {}", target.string(), errno_text(errno)));
        if (::rename(tmp.c_str(), target.c_str()) != 0) {
          const int err = errno;
          (void)::rename(old_tmpl.c_str(), target.c_str());  // put the old one back
          throw Error(fmt::format("cannot replace directory '{}': {}", target.string(), errno_text(err)));
        }
        std::error_code ignored;
        fs::remove_all(old_tmpl, ignored);
      }
    }
  } catch (...) {
    std::error_code ignored;
    fs::remove_all(tmp, ignored);
    throw;
  }
  std::error_code ignored;
  fs::remove_all(tmp, ignored);  // after an exchange: the old contents; otherwise nothing is there
  fsync_directory(parent_of(target));
}

int remove_stale_temporaries(const fs::path& parent, std::string_view name) {
  const std::string dir_prefix = std::string(name) + ".tmp-";
  const std::string file_prefix = "." + dir_prefix;
  int removed = 0;
  std::error_code ec;
  std::vector<fs::path> stale;
  for (const auto& entry : fs::directory_iterator(parent, ec)) {
    const std::string entry_name = entry.path().filename().string();
    if (entry_name.starts_with(dir_prefix) || entry_name.starts_with(file_prefix)) stale.push_back(entry.path());
  }
  for (const auto& path : stale) {
    fs::remove_all(path, ec);
    if (!ec) ++removed;
  }
  return removed;
}

}  // namespace fp8rl
