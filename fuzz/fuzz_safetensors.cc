// The safetensors reader (src/io/safetensors.h): open and validate a file, then every query and
// read the header allows: names, info, metadata, read (supported dtypes), read_as_f32 (F32, BF16,
// F16), read_rows / read_rows_as_f32 on the first and last row, read_into a tensor of the stated
// dtype and shape. Expected response to bad input: fp8rl::Error.
#include <cstdint>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "fuzz_input_file.h"
#include "io/safetensors.h"

namespace {

// numel of `shape`, or -1 if the product overflows int64.
int64_t checked_numel(const fp8rl::Shape& shape) {
  int64_t n = 1;
  for (int i = 0; i < shape.rank; ++i)
    if (__builtin_mul_overflow(n, shape[i], &n)) return -1;
  return n;
}

void read_every_way(const fp8rl::SafetensorsFile& file, const std::string& name) {
  const fp8rl::SafetensorsTensorInfo& info = file.info(name);
  if (info.dtype.has_value()) {
    fp8rl::Tensor whole = file.read(name);
    fp8rl::Tensor again = file.read(name, *info.dtype, info.shape);
    file.read_into(name, again.view());
  }
  // The caller sizes the FP32 destination from the shape; skip shapes whose size cannot be a
  // buffer (the reader has already been exercised on them above).
  const int64_t numel = checked_numel(info.shape);
  const bool half_or_f32 = info.dtype_name == "F32" || info.dtype_name == "BF16" || info.dtype_name == "F16";
  if (numel < 0 || static_cast<uint64_t>(numel) > info.end - info.begin) return;
  if (half_or_f32) {
    std::vector<float> f32(static_cast<size_t>(numel) + 1);
    file.read_as_f32(name, f32.data());
  }
  if (info.shape.rank >= 1 && info.shape[0] > 0) {
    const int64_t rows = info.shape[0];
    const uint64_t row_bytes = (info.end - info.begin) / static_cast<uint64_t>(rows);
    std::vector<unsigned char> raw(static_cast<size_t>(row_bytes) + 1);
    file.read_rows(name, 0, 1, raw.data());
    file.read_rows(name, rows - 1, 1, raw.data());
    if (half_or_f32) {
      std::vector<float> f32(static_cast<size_t>(numel / rows) + 1);
      file.read_rows_as_f32(name, rows - 1, 1, f32.data());
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path path =
      fp8rl::fuzz::write_input_file("model.safetensors", fp8rl::fuzz::as_text(data, size));
  try {
    const fp8rl::SafetensorsFile file = fp8rl::SafetensorsFile::open(path);
    for (const auto& [key, value] : file.metadata()) (void)key, (void)value;
    for (const std::string& name : file.names()) {
      try {
        read_every_way(file, name);
      } catch (const fp8rl::Error&) {
        // One tensor refused (e.g. a dtype fp8rl does not read): try the others.
      }
    }
    (void)file.contains("no such tensor");
  } catch (const fp8rl::Error&) {
  }
  return 0;
}
