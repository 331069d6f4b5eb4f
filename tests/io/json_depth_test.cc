// The nesting depth every parse of outside JSON checks first (io/json_depth.h).
// ctest-file-label: quick
#include "io/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace fp8rl {
namespace {

TEST(JsonDepth, CountsBracketsOutsideStrings) {
  EXPECT_EQ(json_nesting_depth("1"), 0u);
  EXPECT_EQ(json_nesting_depth(R"({"a": [1, {"b": []}]})"), 4u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "[[[[{{{{"})"), 1u);
  EXPECT_EQ(json_nesting_depth(R"({"a": "\"[[[[", "b": [[]]})"), 3u);
  EXPECT_EQ(json_nesting_depth(R"(["\\", [[]]])"), 3u);  // an escaped backslash ends before the quote
  EXPECT_EQ(json_nesting_depth(std::string(100000, '[')), 100000u);
  EXPECT_EQ(json_nesting_depth("]]]][["), 2u);  // closers without openers do not go below zero
}

}  // namespace
}  // namespace fp8rl
