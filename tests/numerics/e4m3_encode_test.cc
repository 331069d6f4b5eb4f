// E4M3 encode: scalar and vectorised encoders against the brute-force nearest-value oracle.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "tests/numerics/e4m3_oracle.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using testing::brute_force_e4m3;
using testing::ocp_e4m3_value;

// Checks the scalar encoder and every vector path against the oracle on `inputs`.
void expect_encoders_match_oracle(const std::vector<float>& inputs) {
  std::vector<uint8_t> expected(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    expected[i] = brute_force_e4m3(inputs[i]);
    ASSERT_EQ(f32_to_e4m3(inputs[i]), expected[i])
        << "scalar encode of " << inputs[i] << " (bits 0x" << std::hex << std::bit_cast<uint32_t>(inputs[i]) << ")";
  }
  for (Isa isa : testing::available_isas()) {
    std::vector<uint8_t> got(inputs.size());
    e4m3_encode_f32(inputs.data(), got.data(), static_cast<int64_t>(inputs.size()), isa);
    for (size_t i = 0; i < inputs.size(); ++i) {
      ASSERT_EQ(got[i], expected[i]) << isa_name(isa) << " encode of " << inputs[i] << " (bits 0x" << std::hex
                                     << std::bit_cast<uint32_t>(inputs[i]) << ")";
    }
  }
}

TEST(E4m3Encode, ExhaustiveOverEveryBf16Pattern) {
  std::vector<float> inputs(65536);
  for (uint32_t h = 0; h < 65536; ++h) inputs[h] = bf16_to_f32(static_cast<bf16_t>(h));
  expect_encoders_match_oracle(inputs);
  for (uint32_t h = 0; h < 65536; ++h) ASSERT_EQ(bf16_to_e4m3(static_cast<bf16_t>(h)), brute_force_e4m3(inputs[h]));
}

TEST(E4m3Encode, NearEveryValueAndEveryMidpoint) {
  // Every finite magnitude, every midpoint between neighbours (exact in FP32), the midpoint
  // beyond 448 (464) and half the smallest subnormal; each +-16 FP32 ulps, both signs.
  std::vector<float> anchors;
  for (int c = 0; c < 127; ++c) {
    const double v = ocp_e4m3_value(static_cast<uint8_t>(c));
    anchors.push_back(static_cast<float>(v));
    const double next = c < 126 ? ocp_e4m3_value(static_cast<uint8_t>(c + 1)) : 480.0;
    anchors.push_back(static_cast<float>((v + next) / 2));
  }
  std::vector<float> inputs;
  for (float a : anchors) {
    for (float sign : {1.0f, -1.0f}) {
      float up = a, down = a;
      inputs.push_back(sign * a);
      for (int k = 0; k < 16; ++k) {
        up = std::nextafter(up, std::numeric_limits<float>::infinity());
        down = std::nextafter(down, -std::numeric_limits<float>::infinity());
        inputs.push_back(sign * up);
        inputs.push_back(sign * down);
      }
    }
  }
  expect_encoders_match_oracle(inputs);
}

TEST(E4m3Encode, SpecialValuesFollowTheRecipe) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_e4m3(inf), 0x7E);    // +Inf saturates
  EXPECT_EQ(f32_to_e4m3(-inf), 0xFE);   // -Inf saturates
  EXPECT_EQ(f32_to_e4m3(1e30f), 0x7E);  // finite overflow saturates
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::max()), 0x7E);
  EXPECT_EQ(f32_to_e4m3(460.0f), 0x7E);  // below the 464 midpoint: rounds to 448
  EXPECT_EQ(f32_to_e4m3(464.0f), 0x7E);  // would round to 480, which does not exist: saturates
  EXPECT_EQ(f32_to_e4m3(std::numeric_limits<float>::quiet_NaN()), 0x7F);
  EXPECT_EQ(f32_to_e4m3(-std::numeric_limits<float>::quiet_NaN()), 0xFF);
  EXPECT_EQ(f32_to_e4m3(0.0f), 0x00);
  EXPECT_EQ(f32_to_e4m3(-0.0f), 0x80);
  EXPECT_EQ(f32_to_e4m3(-1e-30f), 0x80);      // tiny negatives keep their sign
  EXPECT_EQ(f32_to_e4m3(0x1.0p-10f), 0x00);   // exactly half the smallest subnormal: ties to even (0)
  EXPECT_EQ(f32_to_e4m3(0x1.8p-9f), 0x02);    // 1.5 * 2^-9: ties to even (2 * 2^-9)
  EXPECT_EQ(f32_to_e4m3(1.0625f), 0x38);      // midpoint 1 and 1.125: ties to even (1.0)
  EXPECT_EQ(f32_to_e4m3(1.1875f), 0x3A);      // midpoint 1.125 and 1.25: ties to even (1.25)
  expect_encoders_match_oracle({inf, -inf, std::numeric_limits<float>::quiet_NaN(),
                                std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
                                std::numeric_limits<float>::min(), std::numeric_limits<float>::max()});
}

TEST(E4m3Encode, MillionsOfRandomValues) {
  const int64_t n = 1 << 21;
  std::vector<float> inputs(static_cast<size_t>(n));
  RandomStream bits(2026, 0);
  // Half uniformly random bit patterns (every exponent, NaNs, Infs, subnormals), half with
  // magnitudes spread log-uniformly over the E4M3 range and a little beyond.
  for (int64_t i = 0; i < n; ++i) {
    if (i % 2 == 0) {
      inputs[static_cast<size_t>(i)] = std::bit_cast<float>(bits.next_u32());
    } else {
      const float exponent = -12.0f + 22.0f * bits.next_uniform();
      const float sign = (bits.next_u32() & 1) ? -1.0f : 1.0f;
      inputs[static_cast<size_t>(i)] = sign * std::exp2(exponent);
    }
  }
  expect_encoders_match_oracle(inputs);
}

TEST(E4m3Encode, VectorTailsDoNotWritePastTheEnd) {
  for (Isa isa : testing::available_isas()) {
    for (int64_t n : {0, 1, 15, 16, 17, 63, 64, 65, 100}) {
      std::vector<float> in(static_cast<size_t>(n), 3.0f);
      std::vector<uint8_t> out(static_cast<size_t>(n) + 1, 0xAA);
      e4m3_encode_f32(in.data(), out.data(), n, isa);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(out[static_cast<size_t>(i)], f32_to_e4m3(3.0f));
      EXPECT_EQ(out[static_cast<size_t>(n)], 0xAA) << isa_name(isa) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace fp8rl
