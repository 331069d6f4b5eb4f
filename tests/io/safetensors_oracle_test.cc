// fp8rl's safetensors reader and writer against an independent NumPy implementation
// (tools/oracles/safetensors_check.py, run with Debian's /usr/bin/python3), in both directions.
// ctest-file-label: oracle
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <bit>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "io/safetensors.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

const std::string kOracle = "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/safetensors_check.py";

std::string hex_of(const Tensor& t) {
  std::string out;
  const auto* bytes = t.data<uint8_t>();
  for (int64_t i = 0; i < t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); ++i)
    out += fmt::format("{:02x}", bytes[i]);
  return out;
}

TEST(SafetensorsOracle, NumpyReaderAgreesWithOurWriter) {
  if (const std::string why = testing::python_oracle_unavailable("numpy"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.emplace_back("w.f32", Tensor(DType::kF32, {5, 3}));
  tensors.emplace_back("w.bf16", Tensor(DType::kBF16, {2, 2, 2}));
  tensors.emplace_back("w.e4m3", Tensor(DType::kE4M3, {7}));
  tensors.emplace_back("w.i32", Tensor(DType::kI32, {1, 4}));
  tensors.emplace_back("w.u8", Tensor(DType::kU8, {}));
  tensors.emplace_back("w.empty", Tensor(DType::kBF16, {3, 0}));
  SafetensorsWriter writer;
  for (auto& [name, t] : tensors) {
    auto* bytes = t.data<uint8_t>();
    for (int64_t i = 0; i < t.numel() * static_cast<int64_t>(dtype_size(t.dtype())); ++i)
      bytes[i] = static_cast<uint8_t>(i * 37 + name.size());
    writer.add(name, t.view());
  }
  writer.set_metadata("format", "pt");
  writer.write(tmp / "ours.safetensors");

  const std::string cmd = kOracle + " read " + (tmp / "ours.safetensors").string() + " " + (tmp / "dump.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd << " (is python3-numpy installed?)";
  const auto dump = nlohmann::json::parse(testing::read_file_bytes(tmp / "dump.json"));
  EXPECT_EQ(dump["metadata"]["format"], "pt");
  ASSERT_EQ(dump["tensors"].size(), tensors.size());
  for (const auto& [name, t] : tensors) {
    const auto& entry = dump["tensors"][name];
    EXPECT_EQ(entry["dtype"], safetensors_dtype_name(t.dtype())) << name;
    std::vector<int64_t> shape(t.shape().dims.begin(), t.shape().dims.begin() + t.shape().rank);
    EXPECT_EQ(entry["shape"].get<std::vector<int64_t>>(), shape) << name;
    EXPECT_EQ(entry["hex"], hex_of(t)) << name;
  }
}

TEST(SafetensorsOracle, OurReaderAgreesWithNumpyWriter) {
  if (const std::string why = testing::python_oracle_unavailable("numpy"); !why.empty()) GTEST_SKIP() << why;
  testing::TempDir tmp;
  const std::string path = (tmp / "numpy.safetensors").string();
  const std::string cmd = kOracle + " write " + path;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd;
  const SafetensorsFile file = SafetensorsFile::open(path);
  EXPECT_EQ(file.metadata().at("format"), "pt");
  EXPECT_EQ(file.num_tensors(), 6u);

  const Tensor f32 = file.read("f32", DType::kF32, {3, 4});
  for (int i = 0; i < 12; ++i) EXPECT_EQ(f32.data<float>()[i], static_cast<float>(i) * 0.25f - 1.0f);
  const Tensor bf16 = file.read("bf16", DType::kBF16, {2, 3});
  for (int i = 0; i < 6; ++i)
    EXPECT_EQ(bf16.data<uint16_t>()[i], std::bit_cast<uint32_t>(static_cast<float>(i) * 0.5f) >> 16);
  const Tensor e4m3 = file.read("e4m3", DType::kE4M3, {16, 16});
  for (int i = 0; i < 256; ++i) EXPECT_EQ(e4m3.data<uint8_t>()[i], i);
  const Tensor i32 = file.read("i32", DType::kI32, {4});
  EXPECT_EQ(std::vector<int32_t>(i32.data<int32_t>(), i32.data<int32_t>() + 4),
            (std::vector<int32_t>{-3, 0, 7, 2147483647}));
  EXPECT_EQ(file.read("u8_scalar", DType::kU8, {}).data<uint8_t>()[0], 200);
  EXPECT_EQ(file.read("empty", DType::kF32, {0, 5}).numel(), 0);
}

}  // namespace
}  // namespace fp8rl
