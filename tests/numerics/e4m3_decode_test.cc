// E4M3 decode: the scalar codec against the OCP definition, and the vectorised paths against
// the scalar codec, for all 256 codes.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "tests/numerics/e4m3_oracle.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using testing::ocp_e4m3_value;

TEST(E4m3Decode, AllCodesMatchOcpDefinition) {
  for (int c = 0; c < 256; ++c) {
    const uint8_t code = static_cast<uint8_t>(c);
    const double expected = ocp_e4m3_value(code);
    const float got = e4m3_to_f32(code);
    if (std::isnan(expected)) {
      EXPECT_TRUE(std::isnan(got)) << "code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;
      EXPECT_TRUE(e4m3_is_nan(code));
    } else {
      EXPECT_EQ(static_cast<double>(got), expected) << "code " << c;
      EXPECT_EQ(std::signbit(got), (c & 0x80) != 0) << "code " << c;  // -0 for 0x80
      EXPECT_FALSE(e4m3_is_nan(code));
    }
    // BF16 decode is exact: the BF16 pattern is the upper half of the FP32 one.
    EXPECT_EQ(e4m3_to_bf16(code), static_cast<bf16_t>(std::bit_cast<uint32_t>(got) >> 16)) << "code " << c;
  }
}

TEST(E4m3Decode, LandmarkValuesOfTheSpecification) {
  EXPECT_EQ(e4m3_to_f32(0x7E), 448.0f);          // largest finite
  EXPECT_EQ(e4m3_to_f32(0xFE), -448.0f);
  EXPECT_EQ(e4m3_to_f32(0x08), 0x1.0p-6f);       // smallest normal
  EXPECT_EQ(e4m3_to_f32(0x01), 0x1.0p-9f);       // smallest subnormal
  EXPECT_EQ(e4m3_to_f32(0x07), 0.875f * 0x1.0p-6f);  // largest subnormal
  EXPECT_EQ(e4m3_to_f32(0x38), 1.0f);
  EXPECT_EQ(e4m3_to_f32(0x00), 0.0f);
}

TEST(E4m3Decode, VectorPathsEqualScalarForAllCodesAndTails) {
  // All 256 codes, repeated with shifting offsets so every code meets every lane and tail length.
  std::vector<uint8_t> codes(256 * 5 + 13);
  for (size_t i = 0; i < codes.size(); ++i) codes[i] = static_cast<uint8_t>((i * 7 + i / 256) & 0xFF);
  for (Isa isa : testing::available_isas()) {
    for (size_t offset : {0u, 1u, 63u}) {
      for (int64_t n : {0, 1, 15, 16, 17, 63, 64, 65, 127, 256, 1000}) {
        std::vector<float> f(static_cast<size_t>(n) + 1, -7.0f);
        std::vector<bf16_t> h(static_cast<size_t>(n) + 1, 0xABCD);
        e4m3_decode_f32(codes.data() + offset, f.data(), n, isa);
        e4m3_decode_bf16(codes.data() + offset, h.data(), n, isa);
        for (int64_t i = 0; i < n; ++i) {
          const uint8_t c = codes[offset + static_cast<size_t>(i)];
          ASSERT_EQ(std::bit_cast<uint32_t>(f[static_cast<size_t>(i)]), std::bit_cast<uint32_t>(e4m3_to_f32(c)))
              << isa_name(isa) << " code " << int(c) << " at " << i << " of " << n;
          ASSERT_EQ(h[static_cast<size_t>(i)], e4m3_to_bf16(c)) << isa_name(isa) << " code " << int(c);
        }
        EXPECT_EQ(f[static_cast<size_t>(n)], -7.0f) << "wrote past the end";
        EXPECT_EQ(h[static_cast<size_t>(n)], 0xABCD) << "wrote past the end";
      }
    }
  }
}

}  // namespace
}  // namespace fp8rl
