// Instruction-set levels: names, parsing, and what a CPU without a level refuses.
// ctest-file-label: quick
#include "core/cpu_features.h"

#include <gtest/gtest.h>

#include "core/check.h"
#include "core/isa_dispatch.h"
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

TEST(IsaDispatch, MissingLevelsFallBackDownTheOrder) {
  constexpr IsaTable<const char*> portable_only{.portable = "portable"};
  constexpr IsaTable<const char*> portable_avx512{.portable = "portable", .avx512 = "avx512"};
  constexpr IsaTable<const char*> no_amx{.portable = "portable", .avx2 = "avx2", .avx512 = "avx512"};
  constexpr IsaTable<const char*> every{.portable = "portable", .avx2 = "avx2", .avx512 = "avx512", .amx = "amx"};
  constexpr IsaTable<const char*> amx_only{.portable = "portable", .amx = "amx"};
  auto at = [](const IsaTable<const char*>& t, Isa level) { return std::string(t.at(level)); };
  for (Isa level : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAmx}) {
    SCOPED_TRACE(isa_name(level));
    const bool z = level == Isa::kAvx512 || level == Isa::kAmx;
    EXPECT_EQ("portable", at(portable_only, level));
    EXPECT_EQ(z ? "avx512" : "portable", at(portable_avx512, level));
    EXPECT_EQ(z ? "avx512" : level == Isa::kAvx2 ? "avx2" : "portable", at(no_amx, level));
    EXPECT_EQ(isa_name(level), at(every, level));
    EXPECT_EQ(level == Isa::kAmx ? "amx" : "portable", at(amx_only, level));
  }
  EXPECT_EQ("portable", at(every, Isa::kAuto));  // not a resolved level: pick() resolves it
  // pick resolves first: kAuto is the CPU's best level (within FP8RL_ISA).
  EXPECT_EQ(at(every, resolve_isa(Isa::kAuto)), std::string(pick(every, Isa::kAuto)));
  EXPECT_EQ("portable", std::string(pick(every, Isa::kPortable)));
  if (!cpu_features().has_amx_kernels()) {
    EXPECT_NE(testing::error_message([&] { pick(every, Isa::kAmx); }).find("AMX kernels requested"), std::string::npos);
  }
}

}  // namespace
}  // namespace fp8rl
