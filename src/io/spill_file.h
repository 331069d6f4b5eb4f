// A scratch file for bytes that leave memory for a while: the reference policy's weights between
// GRPO's log-prob phases (Transformer::offload_weights), the AdamW moments between optimizer steps
// (policy.optimizer.offload_moments). It has no name (O_TMPFILE; where the file
// system lacks it, a name removed right after creation), so it never outlives the process, not
// even a killed one, and never shows in the directory. Its pages sit in the page cache, which the
// kernel may write out and drop under memory pressure; reading them back costs a copy from the
// page cache, or a read from disk after they were dropped.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>

namespace fp8rl {

// Where to put a spill file for data that belongs with `wanted` (a run directory): `wanted` if it
// exists, else its nearest existing ancestor (the file system the user chose, and not a /tmp that
// may be memory), else the temporary directory.
std::filesystem::path spill_directory_for(const std::filesystem::path& wanted);

class SpillFile {
 public:
  // Creates the file in `dir` (which must exist); throws Error naming `dir`.
  explicit SpillFile(const std::filesystem::path& dir);
  ~SpillFile();
  SpillFile(const SpillFile&) = delete;
  SpillFile& operator=(const SpillFile&) = delete;

  // `bytes` at `offset`, written or read whole; throws Error naming the directory, the offset
  // and the cause (a full disk, a file shorter than the read).
  void write(int64_t offset, const void* data, size_t bytes);
  void read(int64_t offset, void* data, size_t bytes) const;
  // Makes the file `bytes` long; bytes past the old end read as zeros (no disk is written).
  void resize(int64_t bytes);
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  int fd_ = -1;
};

}  // namespace fp8rl
