// Checks that throw fp8rl::Error. Two kinds, by who can cause the failure:
//
//   FP8RL_REQUIRE(v > 0, "{}: key 'lr' must be > 0, got {}", file, v);  // bad input: the message
//   FP8RL_CHECK(rows > 0, "tensor '{}' needs rows > 0, got {}", name, rows);  // a broken contract
//   FP8RL_CHECK_EQ(a.cols, b.rows);   // message shows both expressions and both values
//
// FP8RL_REQUIRE is for what a user can get wrong (a recipe, a file, a flag): its error is the
// message alone, which says what is wrong in the user's words (the file, key or tensor, the value,
// what is allowed). FP8RL_CHECK is for programming errors: its error starts with
// `src/FILE.cc:LINE in FUNCTION: check failed: EXPR` so that a bug report points at the code.
// Both are always on (release builds too) and never sit in inner loops.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <string_view>

namespace fp8rl {

// The one exception type the engine throws for bad input or a broken contract.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void check_fail(const char* file, int line, const char* func, std::string_view condition,
                             std::string_view message);

}  // namespace fp8rl

#define FP8RL_REQUIRE(cond, ...)                                                                    \
  do {                                                                                              \
    if (!(cond)) [[unlikely]]                                                                       \
      throw ::fp8rl::Error(::fmt::format(__VA_ARGS__));                                             \
  } while (0)

#define FP8RL_CHECK(cond, ...)                                                                      \
  do {                                                                                              \
    if (!(cond)) [[unlikely]]                                                                       \
      ::fp8rl::check_fail(__FILE__, __LINE__, __func__, #cond, ::fmt::format(__VA_ARGS__));         \
  } while (0)

#define FP8RL_CHECK_OP_(a, b, op)                                                                   \
  do {                                                                                              \
    const auto& fp8rl_a_ = (a);                                                                     \
    const auto& fp8rl_b_ = (b);                                                                     \
    if (!(fp8rl_a_ op fp8rl_b_)) [[unlikely]]                                                       \
      ::fp8rl::check_fail(__FILE__, __LINE__, __func__, #a " " #op " " #b,                          \
                          ::fmt::format("{} vs {}", fp8rl_a_, fp8rl_b_));                           \
  } while (0)

#define FP8RL_CHECK_EQ(a, b) FP8RL_CHECK_OP_(a, b, ==)
#define FP8RL_CHECK_NE(a, b) FP8RL_CHECK_OP_(a, b, !=)
#define FP8RL_CHECK_LT(a, b) FP8RL_CHECK_OP_(a, b, <)
#define FP8RL_CHECK_LE(a, b) FP8RL_CHECK_OP_(a, b, <=)
#define FP8RL_CHECK_GT(a, b) FP8RL_CHECK_OP_(a, b, >)
#define FP8RL_CHECK_GE(a, b) FP8RL_CHECK_OP_(a, b, >=)
