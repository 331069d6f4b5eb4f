// Reading and writing safetensors files (the Hugging Face checkpoint format).
//
// Layout of a file:
//   bytes [0, 8)        N, the header length, unsigned 64-bit little-endian
//   bytes [8, 8 + N)    a JSON object (UTF-8), padded at the end with spaces:
//                         { "NAME": {"dtype": "F32", "shape": [2, 3], "data_offsets": [BEGIN, END]},
//                           ...,
//                           "__metadata__": {"KEY": "VALUE", ...} }    (optional, strings only)
//   bytes [8 + N, EOF)  the data buffer; BEGIN/END are byte offsets into it, END - BEGIN equals
//                       numel(shape) * dtype size, data row-major (C order), little-endian.
//
// Validation follows the reference implementation: the tensors' byte ranges must tile the data
// buffer exactly (no overlap, no gap, nothing after the last tensor), so a truncated or padded
// file is rejected rather than half-read.
//
// dtypes fp8rl reads and writes: F32, BF16, F8_E4M3, I32, U8 (core DType kF32, kBF16, kE4M3, kI32,
// kU8). A file may contain other standard dtypes (F16, I64, ...): it opens, `info` reports them,
// and reading such a tensor is an error that names it. Shapes have rank 0 (a scalar, one element)
// to 4; dimensions may be 0 (an empty tensor, BEGIN == END).
//
// This writer orders the data buffer by tensor name (byte order), whatever the insertion order,
// so the same tensors always give the same file bytes; the header is padded to a multiple of 8
// bytes so that the data buffer starts 8-byte aligned.
//
// Every error is an fp8rl::Error whose message starts with "safetensors file 'PATH': ", names the
// tensor where there is one, and says what was expected and what was found.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace fp8rl {

// "F32", "BF16", "F8_E4M3", "I32", "U8".
const char* safetensors_dtype_name(DType dtype);
// The core dtype of a safetensors dtype name, or nullopt for names fp8rl does not read.
std::optional<DType> dtype_from_safetensors_name(std::string_view name);

struct SafetensorsTensorInfo {
  std::string name;
  std::string dtype_name;      // as written in the file, e.g. "BF16" or "F16"
  std::optional<DType> dtype;  // set when fp8rl can read this dtype
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte range in the data buffer
};

// Collects tensors and metadata, then writes one file atomically (see io/atomic_file.h).
class SafetensorsWriter {
 public:
  // Records `view` under `name`. No copy is made: the view's data must stay valid and unchanged
  // until `write` returns. Any strides are fine (the data is gathered row-major when written).
  // Throws Error for an empty or duplicate name, "__metadata__", or an unsupported rank.
  void add(std::string name, const TensorView& view);
  // Records a tensor whose bytes are not in memory: `write` asks `fill(first, n, dst)` for its
  // elements [first, first + n) in pieces of at most a few MiB (row-major, `dtype`'s bytes), so a
  // tensor that lives elsewhere (a spill file) is written without a whole copy in memory.
  using Filler = std::function<void(int64_t first, int64_t n, void* dst)>;
  void add_streamed(std::string name, DType dtype, const Shape& shape, Filler fill);
  // A string entry of the header's "__metadata__" object (e.g. {"format": "pt"}).
  void set_metadata(std::string key, std::string value);
  // Writes the file atomically: on error nothing is left at `path` (an older file stays intact).
  void write(const std::filesystem::path& path) const;

  size_t num_tensors() const { return tensors_.size(); }

 private:
  struct Entry {
    TensorView view;  // the dtype and shape; the data unless `fill` is set
    Filler fill;
  };
  void insert(std::string name, Entry entry);
  std::map<std::string, Entry> tensors_;  // ordered by name: the data buffer's order
  std::map<std::string, std::string> metadata_;
};

// An open, validated safetensors file. Tensors are read on demand (pread); the header is parsed
// and checked once in `open`. Move-only; closes the file when destroyed.
class SafetensorsFile {
 public:
  // Opens and validates `path`; throws Error for a missing, truncated or malformed file.
  static SafetensorsFile open(const std::filesystem::path& path);

  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;
  ~SafetensorsFile();

  const std::filesystem::path& path() const { return path_; }
  std::vector<std::string> names() const;  // sorted by name
  size_t num_tensors() const { return tensors_.size(); }
  bool contains(std::string_view name) const;
  // Throws Error naming the file and the tensor if there is no such tensor.
  const SafetensorsTensorInfo& info(std::string_view name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

  // Reads a tensor after checking it has exactly the expected dtype and shape.
  Tensor read(std::string_view name, DType expected_dtype, const Shape& expected_shape) const;
  // Reads a tensor with whatever (supported) dtype and shape the file has.
  Tensor read(std::string_view name) const;
  // Reads a floating-point tensor stored as F32, BF16 or F16 and widens it (exactly) to FP32
  // into `dst` [numel of its shape]. Throws Error naming the tensor for any other dtype.
  void read_as_f32(std::string_view name, float* dst) const;
  // Throws Error naming the file and the tensor unless it has exactly this dtype and shape.
  void expect(std::string_view name, DType dtype, const Shape& shape) const;
  // Reads a tensor into existing storage (any strides) whose dtype and shape must match.
  void read_into(std::string_view name, const TensorView& dst) const;
  // Rows [row0, row0 + rows) of a tensor of rank >= 1 (a row: the product of the other
  // dimensions), for streaming a large tensor in pieces: as stored (any dtype, `dst` holds
  // rows * row elements of its size), or widened to FP32 from F32, BF16 or F16.
  void read_rows(std::string_view name, int64_t row0, int64_t rows, void* dst) const;
  void read_rows_as_f32(std::string_view name, int64_t row0, int64_t rows, float* dst) const;

 private:
  SafetensorsFile() = default;
  void read_bytes(uint64_t file_offset, void* dst, uint64_t bytes, std::string_view tensor) const;

  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;  // 8 + header length
  std::map<std::string, SafetensorsTensorInfo, std::less<>> tensors_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace fp8rl
