// Atomic publication of files and directories (a checkpoint on disk is
// always complete).
//
// A file is written under a temporary name in the target's directory (`.NAME.tmp-XXXXXX`),
// flushed to disk (fsync), then renamed over the target; the directory entry is fsynced too. A
// reader therefore sees either the old file or the complete new one, never a prefix, even after
// a crash. On any error (or if the writer is destroyed before `commit()`), the temporary is
// removed and the target is left untouched.
//
// A directory (a checkpoint: several files) is filled under `DIR.tmp-XXXXXX` and then swapped
// into place with one atomic rename (renameat2 RENAME_EXCHANGE where the file system supports
// it), so `DIR` always names either the complete old directory or the complete new one.
//
// Leftovers of a crash in the middle of a write are the only names with `.tmp-` in them; loaders
// ignore them and `remove_stale_temporaries` deletes them.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace fp8rl {

// Streams bytes into a temporary file next to `path`; `commit()` publishes it as `path`.
// Move-only; destroying an uncommitted writer removes the temporary.
class AtomicFileWriter {
 public:
  explicit AtomicFileWriter(std::filesystem::path path);  // creates the temporary; throws Error
  ~AtomicFileWriter();
  AtomicFileWriter(AtomicFileWriter&& other) noexcept;
  AtomicFileWriter& operator=(AtomicFileWriter&&) = delete;
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  void write(const void* data, size_t bytes);  // throws Error (e.g. disk full) naming the target
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // fsync, close, rename over the target, fsync the directory. After this the writer is inert.
  void commit();

  const std::filesystem::path& path() const { return path_; }
  const std::filesystem::path& temporary_path() const { return tmp_path_; }

 private:
  void discard() noexcept;

  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  int fd_ = -1;
};

// Writes `bytes` to `path` atomically (see above).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Creates `DIR.tmp-XXXXXX`, calls `fill(tmp_dir)` to write the directory's contents, fsyncs every
// regular file in it and the directory itself, then replaces `dir` with it atomically (an older
// `dir` is removed afterwards). If `fill` throws, the temporary directory is removed and `dir` is
// untouched; the exception propagates.
void publish_directory_atomic(const std::filesystem::path& dir,
                              const std::function<void(const std::filesystem::path& tmp_dir)>& fill);

// Removes temporaries left in `parent` by a crash during a write of the file or directory named
// `name` (entries `name.tmp-*` and `.name.tmp-*`). Returns how many were removed.
int remove_stale_temporaries(const std::filesystem::path& parent, std::string_view name);

}  // namespace fp8rl
