// A run's metrics file (metrics.jsonl, sft_metrics.jsonl): one JSON line per step, each written
// whole with write(2) and flushed to disk (fdatasync) before the step goes on. A failed write (a
// full disk, an I/O error) stops the run with an error naming the file and the OS reason; the
// run's last checkpoint is whole, and `--resume` continues from it, cutting the file back to that
// checkpoint's step first. No step line is lost silently.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string_view>

namespace fp8rl {

class MetricsLog {
 public:
  // A new run: creates (or empties) `path`.
  static MetricsLog create(const std::filesystem::path& path);
  // A resumed run whose checkpoint is at step `steps`: keeps the file's first `steps` lines (a
  // resumed run rewrites what follows) and appends after them. Returns how many lines were kept:
  // fewer than `steps` if the file lost lines (deleted or cut by hand), which the caller reports.
  static MetricsLog resume(const std::filesystem::path& path, int64_t steps, int64_t* kept_lines);

  ~MetricsLog();
  MetricsLog(MetricsLog&& other) noexcept;
  MetricsLog& operator=(MetricsLog&&) = delete;
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;

  // Appends `line` and a newline, and flushes them to disk; throws Error on any failure.
  void append(std::string_view line);

 private:
  MetricsLog(std::filesystem::path path, int fd) : path_(std::move(path)), fd_(fd) {}

  std::filesystem::path path_;
  int fd_ = -1;
};

}  // namespace fp8rl
