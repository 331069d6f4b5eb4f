// ctest-file-label: quick
#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <utility>
#include <vector>

#include "core/check.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using testing::read_file_bytes;
using testing::TempDir;

// A tensor whose byte i is a function of (seed, i), so every element is checked.
Tensor patterned(DType dtype, Shape shape, int seed) {
  Tensor t(dtype, shape);
  auto* bytes = t.data<uint8_t>();
  const size_t n = static_cast<size_t>(t.numel()) * dtype_size(dtype);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 31 + static_cast<size_t>(seed) * 7 + 1);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || !(a.shape() == b.shape())) return false;
  const size_t n = static_cast<size_t>(a.numel()) * dtype_size(a.dtype());
  return n == 0 || std::memcmp(a.data<uint8_t>(), b.data<uint8_t>(), n) == 0;
}

// A file made by hand: 8-byte length (the real one unless `length` is given), header, data.
fs::path raw_file(const TempDir& dir, std::string_view header, std::string_view data,
                  std::optional<uint64_t> length = std::nullopt) {
  std::string bytes(8, '\0');
  const uint64_t n = length.value_or(header.size());
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<char>(n >> (8 * i));
  bytes += header;
  bytes += data;
  return dir.write("broken.safetensors", bytes);
}

// The message of the Error that `fn` throws ("" if it throws none).
template <typename Fn>
std::string error_of(Fn fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Safetensors, RoundTripsEveryDtypeAndShapeKind) {
  TempDir tmp;
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("f32.matrix", patterned(DType::kF32, {3, 5}, 1));
  tensors.emplace_back("bf16.rank4", patterned(DType::kBF16, {2, 3, 1, 4}, 2));
  tensors.emplace_back("e4m3.codes", patterned(DType::kE4M3, {130, 7}, 3));
  tensors.emplace_back("i32.vector", patterned(DType::kI32, {9}, 4));
  tensors.emplace_back("u8.scalar", patterned(DType::kU8, {}, 5));   // rank 0: one element
  tensors.emplace_back("f32.scalar", patterned(DType::kF32, {}, 6));
  tensors.emplace_back("f32.empty", patterned(DType::kF32, {0, 4}, 7));  // no bytes
  tensors.emplace_back("bf16.empty", patterned(DType::kBF16, {0}, 8));
  SafetensorsWriter writer;
  for (const auto& [name, t] : tensors) writer.add(name, t.view());
  writer.set_metadata("format", "pt");
  writer.set_metadata("fp8rl.step", "12");
  const fs::path path = tmp / "m.safetensors";
  writer.write(path);

  const std::string bytes = read_file_bytes(path);
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data(), 8);
  EXPECT_EQ(header_len % 8, 0u) << "the data buffer starts 8-byte aligned";

  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.num_tensors(), tensors.size());
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.metadata().at("fp8rl.step"), "12");
  for (const auto& [name, t] : tensors) {
    const SafetensorsTensorInfo& info = file.info(name);
    EXPECT_EQ(info.dtype_name, safetensors_dtype_name(t.dtype()));
    EXPECT_EQ(info.shape, t.shape()) << name;
    EXPECT_TRUE(same_bytes(file.read(name, t.dtype(), t.shape()), t)) << name;
    EXPECT_TRUE(same_bytes(file.read(name), t)) << name;
  }
  EXPECT_EQ(file.info("u8.scalar").shape.rank, 0);
  EXPECT_THAT(file.names(), ::testing::ElementsAre("bf16.empty", "bf16.rank4", "e4m3.codes", "f32.empty", "f32.matrix",
                                                   "f32.scalar", "i32.vector", "u8.scalar"));
}

TEST(Safetensors, FileBytesDoNotDependOnInsertionOrder) {
  TempDir tmp;
  const Tensor a = patterned(DType::kF32, {4}, 1), b = patterned(DType::kU8, {3}, 2);
  SafetensorsWriter w1, w2;
  w1.add("a", a.view());
  w1.add("b", b.view());
  w2.add("b", b.view());
  w2.add("a", a.view());
  w1.write(tmp / "1.safetensors");
  w2.write(tmp / "2.safetensors");
  EXPECT_EQ(read_file_bytes(tmp / "1.safetensors"), read_file_bytes(tmp / "2.safetensors"));
}

// A streamed tensor (its bytes asked for in pieces) gives the file a view of the same bytes does,
// over several pieces and a last partial one; `expect` names what does not match.
TEST(Safetensors, StreamedTensorsWriteTheSameBytesAsViews) {
  TempDir tmp;
  const Tensor big = patterned(DType::kF32, {3, 700001}, 5), small = patterned(DType::kU8, {5}, 6);
  SafetensorsWriter viewed, streamed;
  viewed.add("big", big.view());
  viewed.add("small", small.view());
  std::vector<std::pair<int64_t, int64_t>> pieces;
  streamed.add_streamed("big", DType::kF32, big.shape(), [&](int64_t first, int64_t n, void* dst) {
    pieces.emplace_back(first, n);
    std::memcpy(dst, big.data<float>() + first, static_cast<size_t>(n) * sizeof(float));
  });
  streamed.add_streamed("small", DType::kU8, small.shape(), [&](int64_t first, int64_t n, void* dst) {
    std::memcpy(dst, small.data<uint8_t>() + first, static_cast<size_t>(n));
  });
  viewed.write(tmp / "v.safetensors");
  streamed.write(tmp / "s.safetensors");
  EXPECT_EQ(read_file_bytes(tmp / "v.safetensors"), read_file_bytes(tmp / "s.safetensors"));
  ASSERT_GT(pieces.size(), 1u);
  int64_t next = 0;
  for (const auto& [first, n] : pieces) {
    EXPECT_EQ(first, next);
    next += n;
  }
  EXPECT_EQ(next, big.numel());
  const SafetensorsFile file = SafetensorsFile::open(tmp / "s.safetensors");
  EXPECT_NO_THROW(file.expect("big", DType::kF32, big.shape()));
  EXPECT_THAT(error_of([&] {
                file.expect("big", DType::kF32, {3, 700000});
              }),
              HasSubstr("tensor 'big': expected shape [3, 700000], found [3, 700001]"));
  EXPECT_THAT(error_of([&] { file.expect("big", DType::kBF16, big.shape()); }),
              HasSubstr("tensor 'big': expected dtype BF16, found F32"));
}

TEST(Safetensors, StridedViewsAreWrittenAndReadRowMajor) {
  TempDir tmp;
  // A 3x4 window of a 3x6 buffer: the writer must gather rows, the reader scatter them back.
  Tensor storage = patterned(DType::kBF16, {3, 6}, 9);
  const TensorView window = TensorView::matrix(storage.data<uint16_t>() + 1, DType::kBF16, 3, 4, 6);
  SafetensorsWriter writer;
  writer.add("w", window);
  writer.write(tmp / "s.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(tmp / "s.safetensors");
  const Tensor dense = file.read("w", DType::kBF16, {3, 4});
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(dense.data<uint16_t>()[r * 4 + c], storage.data<uint16_t>()[r * 6 + c + 1]);
  Tensor back(DType::kBF16, {3, 6});
  file.read_into("w", TensorView::matrix(back.data<uint16_t>() + 1, DType::kBF16, 3, 4, 6));
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(back.data<uint16_t>()[r * 6], 0) << "padding untouched";
    for (int c = 0; c < 4; ++c) EXPECT_EQ(back.data<uint16_t>()[r * 6 + c + 1], storage.data<uint16_t>()[r * 6 + c + 1]);
  }
}

TEST(Safetensors, ReadsFilesWithOtherWritersConventions) {
  // Unsorted data order, no padding, an F16 tensor fp8rl does not convert: opens, reports it.
  TempDir tmp;
  const std::string header =
      R"({"b":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"a":{"dtype":"F16","shape":[1],"data_offsets":[2,4]}})";
  const SafetensorsFile file = SafetensorsFile::open(raw_file(tmp, header, "\x01\x02\x03\x04"));
  const Tensor b = file.read("b", DType::kU8, {2});
  EXPECT_EQ(b.data<uint8_t>()[0], 1);
  EXPECT_EQ(b.data<uint8_t>()[1], 2);
  EXPECT_EQ(file.info("a").dtype, std::nullopt);
  EXPECT_THAT(error_of([&] { file.read("a"); }), HasSubstr("tensor 'a' has dtype F16, which fp8rl does not read"));
}

TEST(SafetensorsErrors, MissingFile) {
  TempDir tmp;
  const std::string msg = error_of([&] { SafetensorsFile::open(tmp / "nope.safetensors"); });
  EXPECT_THAT(msg, HasSubstr("nope.safetensors': cannot open: No such file or directory"));
}

TEST(SafetensorsErrors, FileShorterThanTheLengthField) {
  TempDir tmp;
  const auto path = tmp.write("short.safetensors", std::string_view("\x10\x00\x00", 3));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path); }), HasSubstr("short.safetensors': file has 3 bytes, fewer than the 8-byte"));
}

TEST(SafetensorsErrors, HeaderLengthLargerThanFile) {
  TempDir tmp;
  const auto path = raw_file(tmp, "{}", "", 4096);
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path); }),
              HasSubstr("header length 4096 is larger than the 2 bytes that follow it (truncated file?)"));
}

TEST(SafetensorsErrors, AbsurdHeaderLength) {
  TempDir tmp;
  const auto path = raw_file(tmp, "{}", "", 0x4000000000000000ull);
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path); }), HasSubstr("is absurd"));
}

TEST(SafetensorsErrors, InvalidJson) {
  TempDir tmp;
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(raw_file(tmp, R"({"a": {"dtype": )", "")); }),
              HasSubstr("header is not valid JSON"));
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(raw_file(tmp, "[1, 2]", "")); }),
              HasSubstr("header must be a JSON object, found a array"));
  // Found by fuzz_safetensors: a number beyond double's range used to escape as a JSON exception.
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(raw_file(tmp, R"({"x": 1e400})", "")); }),
              HasSubstr("header is not valid JSON"));
}

TEST(SafetensorsErrors, AnEmptyTensorWhoseOtherSizesOverflowIsRefused) {
  // Found by fuzz_safetensors: 0 bytes, yet 2^62 x 2 elements per slice overflowed int64 later.
  TempDir tmp;
  const auto path = raw_file(tmp, R"({"w":{"dtype":"F32","shape":[4611686018427387904,2,0],"data_offsets":[0,0]}})", "");
  EXPECT_THAT(error_of([&] { SafetensorsFile::open(path); }),
              HasSubstr("tensor 'w': shape [4611686018427387904,2,0] has more elements than an int64 counts"));
}

TEST(SafetensorsErrors, MalformedEntries) {
  TempDir tmp;
  const auto open_with = [&](std::string_view header, std::string_view data) {
    return error_of([&] { SafetensorsFile::open(raw_file(tmp, header, data)); });
  };
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F33","shape":[1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("tensor 'w': unknown dtype 'F33'"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("tensor 'w': shape [-1] must hold non-negative integers"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", "abcd"),
              HasSubstr("tensor 'w': 'data_offsets' must be [begin, end]"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[1]}})", "abcd"), HasSubstr("found nothing"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}})", "abcd"),
              HasSubstr("unexpected header field 'x'"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[1,1,1,1,1],"data_offsets":[0,4]}})", "abcd"),
              HasSubstr("has rank 5, fp8rl supports at most 4"));
  EXPECT_THAT(open_with(R"({"__metadata__":{"k":3}})", ""), HasSubstr("'__metadata__' entry 'k' must be a string"));
}

TEST(SafetensorsErrors, OffsetsOutOfRangeOverlappingOrNotMatchingTheShape) {
  TempDir tmp;
  const auto open_with = [&](std::string_view header, std::string_view data) {
    return error_of([&] { SafetensorsFile::open(raw_file(tmp, header, data)); });
  };
  // Truncated data: the header promises 8 bytes, the file holds 4.
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", "abcd"),
              HasSubstr("tensor 'w': data_offsets [0, 8] reach past the data buffer, which has 4 bytes (truncated file?)"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", "abcdefgh"),
              HasSubstr("end before they begin"));
  EXPECT_THAT(open_with(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,8]}})", "abcdefgh"),
              HasSubstr("tensor 'w': BF16 x [2, 3] needs 12 bytes, but data_offsets [0, 8] span 8"));
  EXPECT_THAT(open_with(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})",
                        "abcdef"),
              HasSubstr("tensor 'b' (bytes [2, 6)) overlaps tensor 'a' (bytes [0, 4))"));
  EXPECT_THAT(open_with(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[4,6]}})",
                        "abcdef"),
              HasSubstr("bytes [2, 4) of the data buffer belong to no tensor (before tensor 'b')"));
  EXPECT_THAT(open_with(R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", "abcdef"),
              HasSubstr("4 bytes after the last tensor"));
}

TEST(SafetensorsErrors, WrongDtypeShapeOrMissingTensorOnRead) {
  TempDir tmp;
  const Tensor w = patterned(DType::kBF16, {4, 8}, 1);
  SafetensorsWriter writer;
  writer.add("model.layers.0.mlp.up_proj.weight", w.view());
  writer.write(tmp / "m.safetensors");
  const SafetensorsFile file = SafetensorsFile::open(tmp / "m.safetensors");
  const std::string name = "model.layers.0.mlp.up_proj.weight";
  EXPECT_THAT(error_of([&] { file.read(name, DType::kF32, {4, 8}); }),
              HasSubstr("m.safetensors': tensor 'model.layers.0.mlp.up_proj.weight': expected dtype F32, found BF16"));
  EXPECT_THAT(error_of([&] { file.read(name, DType::kBF16, {8, 4}); }),
              HasSubstr("tensor 'model.layers.0.mlp.up_proj.weight': expected shape [8, 4], found [4, 8]"));
  EXPECT_THAT(error_of([&] { file.read("lm_head.weight", DType::kBF16, {4, 8}); }),
              HasSubstr("no tensor named 'lm_head.weight' (the file has 1 tensors: 'model.layers.0.mlp.up_proj.weight')"));
}

TEST(SafetensorsErrors, FailedWriteKeepsTheOldFile) {
  TempDir tmp;
  const Tensor a = patterned(DType::kF32, {2}, 1);
  SafetensorsWriter writer;
  writer.add("a", a.view());
  writer.write(tmp / "m.safetensors");
  const std::string before = read_file_bytes(tmp / "m.safetensors");
  EXPECT_THROW(writer.write(tmp / "missing_dir" / "m.safetensors"), Error);
  EXPECT_THROW(writer.add("a", a.view()), Error);  // duplicate name
  EXPECT_EQ(read_file_bytes(tmp / "m.safetensors"), before);
}

}  // namespace
}  // namespace fp8rl
