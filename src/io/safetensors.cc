#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/aligned_buffer.h"
#include "core/check.h"
#include "io/atomic_file.h"
#include "io/json_depth.h"
#include "numerics/bf16.h"
#include "numerics/f16.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace fp8rl {
namespace {

// The reference implementation refuses headers above 100 MB; a larger length is a corrupt file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Element sizes of every standard safetensors dtype, including those fp8rl cannot convert, so
// that a file holding them still validates and opens.
constexpr std::pair<const char*, uint64_t> kElementSizes[] = {
    {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
    {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"I64", 8},     {"U64", 8}, {"F64", 8},
};

std::optional<uint64_t> element_size(std::string_view dtype_name) {
  for (const auto& [name, size] : kElementSizes)
    if (dtype_name == name) return size;
  return std::nullopt;
}

[[noreturn]] void fail(const fs::path& path, std::string_view message) {
  throw Error(fmt::format("safetensors file '{}': {}", path.string(), message));
}

std::string shape_text(const Shape& shape) { return shape.str(); }

// Calls fn(byte offset of the element within view.data) for each element in row-major order.
template <typename Fn>
void for_each_element(const TensorView& view, Fn fn) {
  int64_t dims[kMaxDims] = {1, 1, 1, 1}, strides[kMaxDims] = {0, 0, 0, 0};
  const int pad = kMaxDims - view.rank();
  for (int i = 0; i < view.rank(); ++i) {
    dims[pad + i] = view.shape[i];
    strides[pad + i] = view.strides[static_cast<size_t>(i)];
  }
  const int64_t esize = static_cast<int64_t>(dtype_size(view.dtype));
  for (int64_t a = 0; a < dims[0]; ++a)
    for (int64_t b = 0; b < dims[1]; ++b)
      for (int64_t c = 0; c < dims[2]; ++c)
        for (int64_t d = 0; d < dims[3]; ++d)
          fn((a * strides[0] + b * strides[1] + c * strides[2] + d * strides[3]) * esize);
}

uint64_t byte_size(const Shape& shape, uint64_t esize, bool* overflow) {
  uint64_t n = esize;
  *overflow = false;
  for (int i = 0; i < shape.rank; ++i) *overflow |= __builtin_mul_overflow(n, static_cast<uint64_t>(shape[i]), &n);
  return n;
}

// Parses one header entry into `info` (name already set), checking types and the byte count.
void parse_entry(const fs::path& path, const json& entry, uint64_t buffer_bytes, SafetensorsTensorInfo& info) {
  const std::string& name = info.name;
  if (!entry.is_object()) fail(path, fmt::format("tensor '{}': header entry must be an object, found {}", name, entry.dump()));
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(path, fmt::format("tensor '{}': unexpected header field '{}' (expected dtype, shape, data_offsets)", name, key));
  }
  const auto dtype_it = entry.find("dtype");
  if (dtype_it == entry.end() || !dtype_it->is_string()) fail(path, fmt::format("tensor '{}': missing string field 'dtype'", name));
  info.dtype_name = dtype_it->get<std::string>();
  const std::optional<uint64_t> esize = element_size(info.dtype_name);
  if (!esize) fail(path, fmt::format("tensor '{}': unknown dtype '{}'", name, info.dtype_name));
  info.dtype = dtype_from_safetensors_name(info.dtype_name);

  const auto shape_it = entry.find("shape");
  if (shape_it == entry.end() || !shape_it->is_array()) fail(path, fmt::format("tensor '{}': missing array field 'shape'", name));
  if (shape_it->size() > static_cast<size_t>(kMaxDims))
    fail(path, fmt::format("tensor '{}': shape {} has rank {}, fp8rl supports at most {}", name, shape_it->dump(),
                           shape_it->size(), kMaxDims));
  // The product of the non-zero sizes must fit an int64 (the element count of any slice of the
  // tensor), even when a zero size makes the tensor empty.
  uint64_t nonzero_numel = 1;
  for (const json& d : *shape_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))
      fail(path, fmt::format("tensor '{}': shape {} must hold non-negative integers", name, shape_it->dump()));
    const uint64_t size = d.get<uint64_t>();
    if (size > 0 && nonzero_numel > static_cast<uint64_t>(INT64_MAX) / size)
      fail(path, fmt::format("tensor '{}': shape {} has more elements than an int64 counts", name, shape_it->dump()));
    if (size > 0) nonzero_numel *= size;
    info.shape.dims[static_cast<size_t>(info.shape.rank++)] = static_cast<int64_t>(size);
  }

  const auto offsets_it = entry.find("data_offsets");
  if (offsets_it == entry.end() || !offsets_it->is_array() || offsets_it->size() != 2 ||
      !(*offsets_it)[0].is_number_unsigned() || !(*offsets_it)[1].is_number_unsigned())
    fail(path, fmt::format("tensor '{}': 'data_offsets' must be [begin, end] with non-negative integers, found {}", name,
                           offsets_it == entry.end() ? std::string("nothing") : offsets_it->dump()));
  info.begin = (*offsets_it)[0].get<uint64_t>();
  info.end = (*offsets_it)[1].get<uint64_t>();
  if (info.begin > info.end)
    fail(path, fmt::format("tensor '{}': data_offsets [{}, {}] end before they begin", name, info.begin, info.end));
  if (info.end > buffer_bytes)
    fail(path, fmt::format("tensor '{}': data_offsets [{}, {}] reach past the data buffer, which has {} bytes (truncated file?)",
                           name, info.begin, info.end, buffer_bytes));
  bool overflow = false;
  const uint64_t expected = byte_size(info.shape, *esize, &overflow);
  if (overflow || info.end - info.begin != expected)
    fail(path, fmt::format("tensor '{}': {} x {} needs {} bytes, but data_offsets [{}, {}] span {}", name, info.dtype_name,
                           shape_text(info.shape), overflow ? std::string("too many") : std::to_string(expected),
                           info.begin, info.end, info.end - info.begin));
}

// The tensors' byte ranges must tile [0, buffer_bytes) exactly.
void check_ranges_tile_buffer(const fs::path& path, const std::map<std::string, SafetensorsTensorInfo, std::less<>>& tensors,
                              uint64_t buffer_bytes) {
  std::vector<const SafetensorsTensorInfo*> by_offset;
  for (const auto& [name, info] : tensors) by_offset.push_back(&info);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
  });
  uint64_t covered = 0;
  const SafetensorsTensorInfo* previous = nullptr;
  for (const auto* info : by_offset) {
    if (info->begin < covered)
      fail(path, fmt::format("tensor '{}' (bytes [{}, {})) overlaps tensor '{}' (bytes [{}, {}))", info->name, info->begin,
                             info->end, previous->name, previous->begin, previous->end));
    if (info->begin > covered)
      fail(path, fmt::format("bytes [{}, {}) of the data buffer belong to no tensor (before tensor '{}')", covered, info->begin,
                             info->name));
    covered = info->end;
    if (info->end > info->begin || previous == nullptr) previous = info;
  }
  if (covered != buffer_bytes)
    fail(path, fmt::format("the data buffer has {} bytes but the tensors cover only {}: {} bytes after the last tensor",
                           buffer_bytes, covered, buffer_bytes - covered));
}

}  // namespace

const char* safetensors_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kBF16: return "BF16";
    case DType::kE4M3: return "F8_E4M3";
    case DType::kI32: return "I32";
    case DType::kU8: return "U8";
  }
  FP8RL_CHECK(false, "unknown dtype {}", static_cast<int>(dtype));
  return "";
}

std::optional<DType> dtype_from_safetensors_name(std::string_view name) {
  for (DType d : {DType::kF32, DType::kBF16, DType::kE4M3, DType::kI32, DType::kU8})
    if (name == safetensors_dtype_name(d)) return d;
  return std::nullopt;
}

// ---- writer ---------------------------------------------------------------------------------

constexpr size_t kStreamedPieceBytes = size_t{4} << 20;  // add_streamed's pieces

void SafetensorsWriter::add(std::string name, const TensorView& view) {
  FP8RL_CHECK(view.data != nullptr || view.numel() == 0, "tensor '{}' has no data", name);
  insert(std::move(name), Entry{view, nullptr});
}

void SafetensorsWriter::add_streamed(std::string name, DType dtype, const Shape& shape, Filler fill) {
  FP8RL_CHECK(fill != nullptr, "tensor '{}' has no filler", name);
  insert(std::move(name), Entry{TensorView::contiguous(nullptr, dtype, shape), std::move(fill)});
}

void SafetensorsWriter::insert(std::string name, Entry entry) {
  FP8RL_CHECK(!name.empty(), "safetensors tensor names must not be empty");
  FP8RL_CHECK(name != "__metadata__", "'__metadata__' is reserved in safetensors headers");
  FP8RL_CHECK(entry.view.rank() >= 0 && entry.view.rank() <= kMaxDims, "tensor '{}' has rank {}", name,
              entry.view.rank());
  FP8RL_CHECK(!tensors_.contains(name), "tensor '{}' added twice", name);
  tensors_.emplace(std::move(name), std::move(entry));
}

void SafetensorsWriter::set_metadata(std::string key, std::string value) { metadata_[std::move(key)] = std::move(value); }

void SafetensorsWriter::write(const fs::path& path) const {
  json header = json::object();
  uint64_t offset = 0;
  for (const auto& [name, entry] : tensors_) {
    const TensorView& view = entry.view;
    const uint64_t bytes = static_cast<uint64_t>(view.numel()) * dtype_size(view.dtype);
    json shape = json::array();
    for (int i = 0; i < view.rank(); ++i) shape.push_back(view.shape[i]);
    header[name] = {{"dtype", safetensors_dtype_name(view.dtype)}, {"shape", shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');  // the data buffer starts 8-byte aligned

  AtomicFileWriter out(path);
  uint8_t length_le[8];
  for (int i = 0; i < 8; ++i) length_le[i] = static_cast<uint8_t>(static_cast<uint64_t>(header_text.size()) >> (8 * i));
  out.write(length_le, sizeof length_le);
  out.write(header_text);
  for (const auto& named : tensors_) {
    const Entry& entry = named.second;  // not a structured binding: the lambda below captures it
    const TensorView& view = entry.view;
    const size_t bytes = static_cast<size_t>(view.numel()) * dtype_size(view.dtype);
    if (bytes == 0) continue;
    if (entry.fill) {  // in pieces of at most kStreamedPieceBytes
      const size_t esize = dtype_size(view.dtype);
      const int64_t piece = std::max<int64_t>(1, static_cast<int64_t>(kStreamedPieceBytes / esize));
      AlignedBuffer<std::byte> buffer(static_cast<size_t>(std::min(view.numel(), piece)) * esize);
      for (int64_t first = 0; first < view.numel(); first += piece) {
        const int64_t n = std::min(piece, view.numel() - first);
        entry.fill(first, n, buffer.data());
        out.write(buffer.data(), static_cast<size_t>(n) * esize);
      }
      continue;
    }
    if (view.is_contiguous()) {
      out.write(view.data, bytes);
      continue;
    }
    AlignedBuffer<std::byte> packed(bytes);  // gather a strided view row-major
    const size_t esize = dtype_size(view.dtype);
    size_t pos = 0;
    for_each_element(view, [&](int64_t offset_bytes) {
      std::memcpy(packed.data() + pos, static_cast<const std::byte*>(view.data) + offset_bytes, esize);
      pos += esize;
    });
    out.write(packed.data(), bytes);
  }
  out.commit();
}

// ---- reader ---------------------------------------------------------------------------------

SafetensorsFile SafetensorsFile::open(const fs::path& path) {
  SafetensorsFile file;
  file.path_ = path;
  // O_NONBLOCK: a FIFO named by mistake is refused below instead of waiting for a writer.
  file.fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (file.fd_ < 0) fail(path, fmt::format("cannot open: {}", std::strerror(errno)));
  struct stat st {};
  if (::fstat(file.fd_, &st) != 0) fail(path, fmt::format("cannot stat: {}", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail(path, S_ISDIR(st.st_mode) ? "is a directory, expected a regular file" : "not a regular file (a FIFO, socket or device)");
  ::fcntl(file.fd_, F_SETFL, ::fcntl(file.fd_, F_GETFL) & ~O_NONBLOCK);
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8)
    fail(path, fmt::format("file has {} bytes, fewer than the 8-byte header length every safetensors file starts with "
                           "(truncated or not a safetensors file)", file_size));
  uint8_t length_le[8];
  file.read_bytes(0, length_le, 8, "");
  uint64_t header_bytes = 0;
  for (int i = 0; i < 8; ++i) header_bytes |= static_cast<uint64_t>(length_le[i]) << (8 * i);
  if (header_bytes > kMaxHeaderBytes)
    fail(path, fmt::format("header length {} is absurd (limit {} bytes): corrupt or not a safetensors file", header_bytes,
                           kMaxHeaderBytes));
  if (header_bytes > file_size - 8)
    fail(path, fmt::format("header length {} is larger than the {} bytes that follow it (truncated file?)", header_bytes,
                           file_size - 8));
  std::string header_text(header_bytes, '\0');
  file.read_bytes(8, header_text.data(), header_bytes, "");
  file.data_start_ = 8 + header_bytes;
  const uint64_t buffer_bytes = file_size - file.data_start_;

  if (json_nesting_depth(header_text) > kMaxJsonDepth)
    fail(path, fmt::format("header is nested deeper than {} levels", kMaxJsonDepth));
  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {  // a syntax error, or a number beyond double's range
    fail(path, fmt::format("header is not valid JSON: {}", e.what()));
  }
  if (!header.is_object()) fail(path, fmt::format("header must be a JSON object, found a {}", header.type_name()));
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(path, "'__metadata__' must be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(path, fmt::format("'__metadata__' entry '{}' must be a string, found {}", key, value.dump()));
        file.metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    SafetensorsTensorInfo info;
    info.name = name;
    parse_entry(path, entry, buffer_bytes, info);
    file.tensors_.emplace(name, std::move(info));
  }
  check_ranges_tile_buffer(path, file.tensors_, buffer_bytes);
  return file;
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)),
      fd_(std::exchange(other.fd_, -1)),
      data_start_(other.data_start_),
      tensors_(std::move(other.tensors_)),
      metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    tensors_ = std::move(other.tensors_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, info] : tensors_) out.push_back(name);
  return out;
}

bool SafetensorsFile::contains(std::string_view name) const { return tensors_.find(name) != tensors_.end(); }

const SafetensorsTensorInfo& SafetensorsFile::info(std::string_view name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    std::string listing;
    int shown = 0;
    for (const auto& [n, i] : tensors_) {
      if (shown++ == 8) {
        listing += ", ...";
        break;
      }
      listing += fmt::format("{}'{}'", listing.empty() ? "" : ", ", n);
    }
    fail(path_, fmt::format("no tensor named '{}' (the file has {} tensors{}{})", name, tensors_.size(),
                            listing.empty() ? "" : ": ", listing));
  }
  return it->second;
}

void SafetensorsFile::read_bytes(uint64_t file_offset, void* dst, uint64_t bytes, std::string_view tensor) const {
  auto* p = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, p, bytes, static_cast<off_t>(file_offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail(path_, fmt::format("{}{}read failed at byte {}: {}", tensor.empty() ? "" : "tensor '", tensor.empty() ? "" : "': ",
                              file_offset, n < 0 ? std::strerror(errno) : "unexpected end of file (file changed while open?)"));
    p += n;
    file_offset += static_cast<uint64_t>(n);
    bytes -= static_cast<uint64_t>(n);
  }
}

void SafetensorsFile::expect(std::string_view name, DType dtype, const Shape& shape) const {
  const SafetensorsTensorInfo& meta = info(name);
  if (!meta.dtype) {
    fail(path_, fmt::format("tensor '{}' has dtype {}, which fp8rl does not read (supported: F32, BF16, F8_E4M3, I32, U8)",
                            name, meta.dtype_name));
  }
  if (*meta.dtype != dtype)
    fail(path_,
         fmt::format("tensor '{}': expected dtype {}, found {}", name, safetensors_dtype_name(dtype), meta.dtype_name));
  if (!(meta.shape == shape))
    fail(path_,
         fmt::format("tensor '{}': expected shape {}, found {}", name, shape_text(shape), shape_text(meta.shape)));
}

void SafetensorsFile::read_into(std::string_view name, const TensorView& dst) const {
  expect(name, dst.dtype, dst.shape);
  const SafetensorsTensorInfo& meta = info(name);
  const uint64_t bytes = meta.end - meta.begin;
  if (bytes == 0) return;
  FP8RL_CHECK(dst.data != nullptr, "reading tensor '{}' into a view without data", name);
  if (dst.is_contiguous()) {
    read_bytes(data_start_ + meta.begin, dst.data, bytes, name);
    return;
  }
  AlignedBuffer<std::byte> packed(bytes);
  read_bytes(data_start_ + meta.begin, packed.data(), bytes, name);
  const size_t esize = dtype_size(dst.dtype);
  size_t pos = 0;
  for_each_element(dst, [&](int64_t offset_bytes) {
    std::memcpy(static_cast<std::byte*>(dst.data) + offset_bytes, packed.data() + pos, esize);
    pos += esize;
  });
}

Tensor SafetensorsFile::read(std::string_view name, DType expected_dtype, const Shape& expected_shape) const {
  Tensor out(expected_dtype, expected_shape);
  read_into(name, out.view());
  return out;
}

Tensor SafetensorsFile::read(std::string_view name) const {
  const SafetensorsTensorInfo& meta = info(name);
  if (!meta.dtype)
    fail(path_, fmt::format("tensor '{}' has dtype {}, which fp8rl does not read (supported: F32, BF16, F8_E4M3, I32, U8)",
                            name, meta.dtype_name));
  return read(name, *meta.dtype, meta.shape);
}

void SafetensorsFile::read_as_f32(std::string_view name, float* dst) const {
  const SafetensorsTensorInfo& meta = info(name);
  const int64_t n = meta.shape.numel();
  if (meta.dtype_name == "F32") {
    read_into(name, TensorView::contiguous(dst, DType::kF32, meta.shape));
    return;
  }
  if (meta.dtype_name != "BF16" && meta.dtype_name != "F16")
    fail(path_, fmt::format("tensor '{}' has dtype {}, expected F32, BF16 or F16", name, meta.dtype_name));
  std::vector<uint16_t> half(static_cast<size_t>(n));
  read_bytes(data_start_ + meta.begin, half.data(), meta.end - meta.begin, name);
  if (meta.dtype_name == "BF16") {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(half[static_cast<size_t>(i)]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(half[static_cast<size_t>(i)]);
  }
}

namespace {
int64_t row_elements(const SafetensorsTensorInfo& meta) {
  int64_t n = 1;
  for (int i = 1; i < meta.shape.rank; ++i) n *= meta.shape[i];
  return n;
}
}  // namespace

void SafetensorsFile::read_rows(std::string_view name, int64_t row0, int64_t rows, void* dst) const {
  const SafetensorsTensorInfo& meta = info(name);
  if (meta.shape.rank < 1 || row0 < 0 || rows < 0 || row0 + rows > meta.shape[0])
    fail(path_, fmt::format("tensor '{}' {}: rows [{}, {}) requested", name, shape_text(meta.shape), row0, row0 + rows));
  const uint64_t row_bytes = (meta.end - meta.begin) / static_cast<uint64_t>(std::max<int64_t>(meta.shape[0], 1));
  if (rows == 0 || row_bytes == 0) return;
  read_bytes(data_start_ + meta.begin + static_cast<uint64_t>(row0) * row_bytes, dst,
             static_cast<uint64_t>(rows) * row_bytes, name);
}

void SafetensorsFile::read_rows_as_f32(std::string_view name, int64_t row0, int64_t rows, float* dst) const {
  const SafetensorsTensorInfo& meta = info(name);
  const int64_t n = rows * row_elements(meta);
  if (meta.dtype_name == "F32") return read_rows(name, row0, rows, dst);
  if (meta.dtype_name != "BF16" && meta.dtype_name != "F16")
    fail(path_, fmt::format("tensor '{}' has dtype {}, expected F32, BF16 or F16", name, meta.dtype_name));
  std::vector<uint16_t> half(static_cast<size_t>(n));
  read_rows(name, row0, rows, half.data());
  if (meta.dtype_name == "BF16") {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(half[static_cast<size_t>(i)]);
  } else {
    for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(half[static_cast<size_t>(i)]);
  }
}

}  // namespace fp8rl
