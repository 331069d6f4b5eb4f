// Reading a user's file without hanging, exhausting memory or misreading it.
//
// Every file a job reads on a user's say-so (recipes, config.json, tokenizer.json, datasets,
// checkpoint state, the metrics file a resume cuts back) is opened here (safetensors shards by
// the same rule in io/safetensors.cc): without blocking (a FIFO or a
// device named by mistake is refused instead of waiting forever), checked to be a regular file (a
// directory gets "is a directory", not "no examples"), and read with a size limit that the
// caller states (a 50 MB line in a dataset is refused when the limit is reached, before it is
// parsed). Errors name the file, what it was expected to be and the OS reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace fp8rl {

// An open regular file, read sequentially. Move-only; closes on destruction.
class InputFile {
 public:
  // `what` names the file's role in errors, e.g. "dataset" or "tokenizer": "dataset 'x.jsonl': ...";
  // `context`, if any, follows the name: "recipe 'b.yaml' (named by `defaults` at a.yaml:2): ...".
  InputFile(const std::filesystem::path& path, std::string_view what, std::string_view context = {});
  ~InputFile();
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;

  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // at open
  const std::filesystem::path& path() const { return path_; }
  // "WHAT 'PATH'", the prefix of this file's errors.
  std::string describe() const;

  // The whole file; refuses a file larger than `max_bytes` before reading it.
  std::string read_all(uint64_t max_bytes);
  // The next line without its '\n' (and without a '\r' before it) into `line`; false at the end of
  // the file. A line longer than `max_line_bytes` is refused once that many bytes have been read,
  // naming its line number and `limit_hint` (e.g. "data.max_line_bytes").
  bool read_line(std::string& line, uint64_t max_line_bytes, std::string_view limit_hint);
  int64_t line_number() const { return line_number_; }  // of the line read last (1-based)

 private:
  bool fill();  // refills buf_; false at the end of the file

  std::filesystem::path path_;
  std::string what_;
  std::string context_;
  int fd_ = -1;
  uint64_t size_ = 0;
  std::string buf_;
  size_t buf_pos_ = 0;
  int64_t line_number_ = 0;
};

// The whole of a small user file (a recipe, a JSON file), opened as above.
std::string read_input_file(const std::filesystem::path& path, std::string_view what, uint64_t max_bytes,
                            std::string_view context = {});

// Limits on files read whole. Real ones are far smaller: Qwen3's tokenizer.json is 11 MB.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxRecipeBytes = uint64_t{16} << 20;

}  // namespace fp8rl
