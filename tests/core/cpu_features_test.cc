// Instruction-set levels: names, parsing, and what a CPU without a level refuses.
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

TEST(CpuFeatures, LevelNamesParseBack) {
  for (Isa isa : {Isa::kAuto, Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) EXPECT_EQ(isa, parse_isa(isa_name(isa), "test"));
  const std::string message = testing::error_message([] { parse_isa("avx9000", "FP8RL_ISA"); });
  EXPECT_NE(message.find("FP8RL_ISA"), std::string::npos) << message;
  EXPECT_NE(message.find("\"avx9000\""), std::string::npos) << message;
  EXPECT_NE(message.find("portable, avx2, avx512 or amx"), std::string::npos) << message;
}

TEST(CpuFeatures, LevelsNestAndUnavailableOnesAreRefused) {
  const CpuFeatures& f = cpu_features();
  EXPECT_TRUE(!f.has_amx_kernels() || f.has_avx512_kernels());  // AMX kernels build on the AVX-512 ones
  EXPECT_TRUE(!f.has_avx512_kernels() || f.has_avx2_kernels());  // and those on the AVX2 ones
  EXPECT_TRUE(uses_avx512(Isa::kAvx512) && uses_avx512(Isa::kAmx) && !uses_avx512(Isa::kPortable) &&
              !uses_avx512(Isa::kAvx2));
  EXPECT_EQ(Isa::kPortable, resolve_isa(Isa::kPortable));
  const Isa best = resolve_isa(Isa::kAuto);
  EXPECT_NE(best, Isa::kAuto);
  if (!f.has_amx_kernels()) {
    EXPECT_NE(best, Isa::kAmx);
    EXPECT_NE(testing::error_message([] { resolve_isa(Isa::kAmx); }).find("AMX kernels requested"), std::string::npos);
  } else {
    EXPECT_EQ(Isa::kAmx, resolve_isa(Isa::kAmx));
  }
  if (!f.has_avx512_kernels()) {
    EXPECT_NE(testing::error_message([] { resolve_isa(Isa::kAvx512); }).find("AVX-512 kernels requested"),
              std::string::npos);
  }
  if (!f.has_avx2_kernels()) {
    EXPECT_NE(testing::error_message([] { resolve_isa(Isa::kAvx2); }).find("AVX2 kernels requested"),
              std::string::npos);
  } else {
    EXPECT_EQ(Isa::kAvx2, resolve_isa(Isa::kAvx2));
  }
}

}  // namespace
}  // namespace fp8rl
