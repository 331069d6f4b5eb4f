// ctest-file-label: quick
#include "core/check.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/test_util.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

using testing::error_message;

TEST(Check, PassingCheckDoesNothing) { EXPECT_NO_THROW(FP8RL_CHECK(1 + 1 == 2, "math")); }

TEST(Check, MessageNamesFileLineConditionAndValues) {
  const std::string m = error_message([] {
    const int rows = -3;
    FP8RL_CHECK(rows > 0, "tensor '{}' needs rows > 0, got {}", "w_q", rows);
  });
  EXPECT_THAT(m, HasSubstr("tests/core/check_test.cc:"));
  EXPECT_THAT(m, HasSubstr("rows > 0"));
  EXPECT_THAT(m, HasSubstr("tensor 'w_q' needs rows > 0, got -3"));
}

TEST(Check, ComparisonChecksPrintBothValues) {
  const std::string m = error_message([] {
    const int64_t a = 128, b = 96;
    FP8RL_CHECK_EQ(a, b);
  });
  EXPECT_THAT(m, HasSubstr("a == b"));
  EXPECT_THAT(m, HasSubstr("128 vs 96"));
}

}  // namespace
}  // namespace fp8rl
