// BF16 rounding against PyTorch (an implementation nobody on this project wrote), run as a
// subprocess with Debian's /usr/bin/python3 (scripts/setup.sh installs python3-torch).
// ctest-file-label: oracle
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/rng.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

TEST(Bf16TorchOracle, RoundingMatchesPyTorch) {
  if (const std::string why = testing::python_oracle_unavailable("torch"); !why.empty()) GTEST_SKIP() << why;
  std::vector<float> x;
  RandomStream bits(5, 0);
  for (int i = 0; i < 200000; ++i) x.push_back(std::bit_cast<float>(bits.next_u32()));
  for (uint32_t h = 0; h < 65536; h += 7) {  // exact ties and their neighbours
    for (uint32_t d : {0x7FFFu, 0x8000u, 0x8001u}) x.push_back(std::bit_cast<float>((h << 16) + d));
  }
  const testing::TempDir dir;
  const std::string in = (dir / "bf16_in").string();
  const std::string out = (dir / "bf16_out").string();
  std::ofstream(in, std::ios::binary).write(reinterpret_cast<const char*>(x.data()),
                                            static_cast<std::streamsize>(x.size() * sizeof(float)));
  const std::string cmd = "/usr/bin/python3 " FP8RL_SOURCE_DIR "/tools/oracles/bf16_torch.py " + in + " " + out;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "oracle failed: " << cmd << " (is python3-torch installed?)";
  std::vector<bf16_t> torch_bits(x.size());
  std::ifstream(out, std::ios::binary)
      .read(reinterpret_cast<char*>(torch_bits.data()), static_cast<std::streamsize>(x.size() * sizeof(bf16_t)));
  std::vector<bf16_t> ours(x.size());
  bf16_encode_f32(x.data(), ours.data(), static_cast<int64_t>(x.size()));
  int64_t compared = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) {  // PyTorch canonicalises NaN payloads; both must be NaN
      ASSERT_TRUE(std::isnan(bf16_to_f32(torch_bits[i])));
      ASSERT_TRUE(std::isnan(bf16_to_f32(ours[i])));
      continue;
    }
    ASSERT_EQ(ours[i], torch_bits[i]) << "input bits 0x" << std::hex << std::bit_cast<uint32_t>(x[i]);
    ASSERT_EQ(f32_to_bf16(x[i]), torch_bits[i]);
    ++compared;
  }
  EXPECT_GT(compared, 200000);
}

}  // namespace
}  // namespace fp8rl
