#include "io/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace fp8rl {

namespace {

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

constexpr size_t kReadChunk = size_t{1} << 16;

}  // namespace

InputFile::InputFile(const std::filesystem::path& path, std::string_view what, std::string_view context)
    : path_(path), what_(what), context_(context) {
  // O_NONBLOCK: opening a FIFO for reading waits for a writer otherwise. A directory opens
  // (O_RDONLY) and is refused below with the other non-regular files.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  FP8RL_REQUIRE(fd_ >= 0, "{}: cannot open: {}", describe(), std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    FP8RL_REQUIRE(false, "{}: cannot stat: {}", describe(), std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    FP8RL_REQUIRE(false, "{}: is {}, expected a regular file", describe(), file_kind(st.st_mode));
  }
  // Regular files never block; clear the flag so reads behave as usual.
  ::fcntl(fd_, F_SETFL, ::fcntl(fd_, F_GETFL) & ~O_NONBLOCK);
  size_ = static_cast<uint64_t>(st.st_size);
}

InputFile::~InputFile() {
  if (fd_ >= 0) ::close(fd_);
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)),
      what_(std::move(other.what_)),
      context_(std::move(other.context_)),
      fd_(other.fd_),
      size_(other.size_),
      buf_(std::move(other.buf_)),
      buf_pos_(other.buf_pos_),
      line_number_(other.line_number_) {
  other.fd_ = -1;
}

std::string InputFile::describe() const {
  return fmt::format("{} '{}'{}{}", what_, path_.string(), context_.empty() ? "" : " ", context_);
}

std::string InputFile::read_all(uint64_t max_bytes) {
  FP8RL_REQUIRE(size_ <= max_bytes, "{}: {} bytes, more than the {} a file of this kind may have", describe(), size_,
                max_bytes);
  std::string out;
  out.reserve(size_);
  char chunk[kReadChunk];
  for (;;) {
    const ssize_t n = ::read(fd_, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    FP8RL_REQUIRE(n >= 0, "{}: read failed: {}", describe(), std::strerror(errno));
    if (n == 0) break;
    out.append(chunk, static_cast<size_t>(n));
    // The file may grow while it is read; the limit holds regardless.
    FP8RL_REQUIRE(out.size() <= max_bytes, "{}: more than the {} bytes a file of this kind may have", describe(),
                  max_bytes);
  }
  return out;
}

bool InputFile::fill() {
  buf_.resize(kReadChunk);
  for (;;) {
    const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
    if (n < 0 && errno == EINTR) continue;
    FP8RL_REQUIRE(n >= 0, "{}: read failed: {}", describe(), std::strerror(errno));
    buf_.resize(static_cast<size_t>(n));
    buf_pos_ = 0;
    return n > 0;
  }
}

bool InputFile::read_line(std::string& line, uint64_t max_line_bytes, std::string_view limit_hint) {
  line.clear();
  bool any = false;
  for (;;) {
    if (buf_pos_ == buf_.size() && !fill()) {
      if (!any) return false;
      break;  // a last line without '\n'
    }
    any = true;
    const char* begin = buf_.data() + buf_pos_;
    const size_t left = buf_.size() - buf_pos_;
    const void* nl = std::memchr(begin, '\n', left);
    const size_t take = nl ? static_cast<size_t>(static_cast<const char*>(nl) - begin) : left;
    FP8RL_REQUIRE(line.size() + take <= max_line_bytes, "{} line {}: longer than {} bytes (the limit is {})",
                  describe(), line_number_ + 1, max_line_bytes, limit_hint);
    line.append(begin, take);
    buf_pos_ += take + (nl ? 1 : 0);
    if (nl) break;
  }
  ++line_number_;
  if (!line.empty() && line.back() == '\r') line.pop_back();
  return true;
}

std::string read_input_file(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes,
                            std::string_view context) {
  return InputFile(path, what, context).read_all(max_bytes);
}

}  // namespace fp8rl
