// BF16 codec: decode exhaustively, encode against an independent round-to-nearest-even oracle.
// ctest-file-label: quick
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <vector>

#include "core/rng.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

// The two BF16 neighbours of x (truncation and the next value away from zero), the nearer
// chosen in double arithmetic, ties to the even pattern; NaN -> a quiet NaN with x's sign.
bf16_t oracle_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return static_cast<bf16_t>((bits >> 16) | 0x40);
  const uint32_t low = bits & 0xFFFF0000u, high = low + 0x10000u;
  const double a = std::fabs(static_cast<double>(x));
  const double vlow = std::fabs(static_cast<double>(std::bit_cast<float>(low)));
  // `high` may be the Inf pattern: its "value" for rounding is 2^128.
  const double vhigh = (high & 0x7FFFFFFFu) == 0x7F800000u ? std::ldexp(1.0, 128)
                                                          : std::fabs(static_cast<double>(std::bit_cast<float>(high)));
  if (std::isinf(x)) return static_cast<bf16_t>(bits >> 16);
  const double dl = a - vlow, dh = vhigh - a;
  const uint32_t pick = dl < dh ? low : dh < dl ? high : ((low >> 16) & 1 ? high : low);
  return static_cast<bf16_t>(pick >> 16);
}

void expect_encoders_match_oracle(const std::vector<float>& inputs) {
  for (float x : inputs) ASSERT_EQ(f32_to_bf16(x), oracle_bf16(x)) << "bits 0x" << std::hex << std::bit_cast<uint32_t>(x);
  for (Isa isa : testing::available_isas()) {
    std::vector<bf16_t> got(inputs.size() + 1, 0x1234);
    bf16_encode_f32(inputs.data(), got.data(), static_cast<int64_t>(inputs.size()), isa);
    for (size_t i = 0; i < inputs.size(); ++i)
      ASSERT_EQ(got[i], oracle_bf16(inputs[i])) << isa_name(isa) << " bits 0x" << std::hex << std::bit_cast<uint32_t>(inputs[i]);
    EXPECT_EQ(got.back(), 0x1234) << "wrote past the end";
  }
}

TEST(Bf16, DecodeIsExactForEveryPattern) {
  std::vector<bf16_t> all(65536);
  for (uint32_t h = 0; h < 65536; ++h) all[h] = static_cast<bf16_t>(h);
  for (Isa isa : testing::available_isas()) {
    std::vector<float> out(65536);
    bf16_decode_f32(all.data(), out.data(), 65536, isa);
    for (uint32_t h = 0; h < 65536; ++h) {
      ASSERT_EQ(std::bit_cast<uint32_t>(out[h]), h << 16) << isa_name(isa);
      ASSERT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(static_cast<bf16_t>(h))), h << 16);
    }
  }
}

TEST(Bf16, EncodeNearEveryValueAndMidpoint) {
  std::vector<float> inputs;
  for (uint32_t h = 0; h < 65536; h += 3) {
    const uint32_t base = h << 16;
    for (uint32_t d : {0u, 1u, 0x7FFFu, 0x8000u, 0x8001u, 0xFFFFu}) inputs.push_back(std::bit_cast<float>(base + d));
  }
  expect_encoders_match_oracle(inputs);
}

TEST(Bf16, EncodeSpecialValues) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7F80);  // rounds to +Inf
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()), 0xFF80);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);  // signalling NaN made quiet
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(f32_to_bf16(std::bit_cast<float>(0x00018000u)), 0x0002);  // subnormal tie: to even
}

TEST(Bf16, RoundInPlaceEqualsEncodeThenDecode) {
  std::vector<float> x(1000);
  RandomStream bits(3, 0);
  for (float& v : x) v = std::bit_cast<float>(bits.next_u32());
  for (Isa isa : testing::available_isas()) {
    std::vector<float> y = x;
    bf16_round_f32(y.data(), static_cast<int64_t>(y.size()) - 3, isa);
    for (size_t i = 0; i + 3 < x.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(bf16_to_f32(f32_to_bf16(x[i])))) << isa_name(isa);
    for (size_t i = x.size() - 3; i < x.size(); ++i) ASSERT_EQ(std::bit_cast<uint32_t>(y[i]), std::bit_cast<uint32_t>(x[i]));
  }
}

TEST(Bf16, EncodeMillionsOfRandomPatterns) {
  std::vector<float> inputs(1 << 21);
  RandomStream bits(99, 0);
  for (float& x : inputs) x = std::bit_cast<float>(bits.next_u32());
  expect_encoders_match_oracle(inputs);
}

}  // namespace
}  // namespace fp8rl
