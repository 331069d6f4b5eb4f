// ctest-file-label: quick
#include "tasks/arithmetic.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "core/check.h"
#include "io/config.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

std::string error_of(const ArithmeticTaskConfig& c) {
  try {
    ArithmeticTask task(c);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

ArithmeticTaskConfig small_config() {
  ArithmeticTaskConfig c;
  c.train_size = 2000;
  c.val_size = 200;
  c.seed = 7;
  return c;
}

TEST(ArithmeticTask, SplitsAreDeterministicAndSeedDependent) {
  const ArithmeticTask a(small_config()), b(small_config());
  ASSERT_EQ(a.train().size(), 2000u);
  ASSERT_EQ(a.validation().size(), 200u);
  for (size_t i = 0; i < a.train().size(); ++i) EXPECT_EQ(a.train()[i].prompt, b.train()[i].prompt);
  for (size_t i = 0; i < a.validation().size(); ++i) EXPECT_EQ(a.validation()[i].prompt, b.validation()[i].prompt);
  ArithmeticTaskConfig other = small_config();
  other.seed = 8;
  const ArithmeticTask c(other);
  int same = 0;
  for (size_t i = 0; i < 200; ++i) same += c.validation()[i].prompt == a.validation()[i].prompt;
  EXPECT_LT(same, 20);
}

TEST(ArithmeticTask, SplitsAreDisjointAndValidationIsDistinct) {
  // A small space (1-2 digit '+', 10000 prompts) makes collisions certain without the rejection.
  ArithmeticTaskConfig c = small_config();
  c.max_operand_digits = 2;
  c.operators = "+";
  c.val_size = 3000;
  c.train_size = 20000;
  const ArithmeticTask task(c);
  std::set<std::string> val;
  for (const Example& e : task.validation()) val.insert(e.prompt);
  EXPECT_EQ(val.size(), task.validation().size());
  for (const Example& e : task.train()) EXPECT_FALSE(val.contains(e.prompt)) << e.prompt;
}

TEST(ArithmeticTask, ValidationDoesNotDependOnTrainSizeAndTrainExtendsAsAPrefix) {
  ArithmeticTaskConfig c = small_config();
  const ArithmeticTask small(c);
  c.train_size = 5000;
  const ArithmeticTask big(c);
  for (size_t i = 0; i < small.validation().size(); ++i)
    EXPECT_EQ(small.validation()[i].prompt, big.validation()[i].prompt);
  for (size_t i = 0; i < small.train().size(); ++i) EXPECT_EQ(small.train()[i].prompt, big.train()[i].prompt);
}

TEST(ArithmeticTask, PromptsAndAnswersHaveTheDocumentedForm) {
  ArithmeticTaskConfig c = small_config();
  c.min_operand_digits = 2;
  c.max_operand_digits = 4;
  const ArithmeticTask task(c);
  // "A op B =" with A and B of 2-4 digits and no leading zero.
  auto operand_ok = [](const std::string& s) { return s.size() >= 2 && s.size() <= 4 && s[0] != '0'; };
  std::set<char> ops;
  bool negative = false;
  const CharTokenizer tok;
  for (const Example& e : task.train()) {
    const size_t op_pos = e.prompt.find_first_of("+-*");
    ASSERT_NE(op_pos, std::string::npos) << e.prompt;
    ASSERT_TRUE(e.prompt.ends_with("=")) << e.prompt;
    const std::string a_text = e.prompt.substr(0, op_pos);
    const std::string b_text = e.prompt.substr(op_pos + 1, e.prompt.size() - op_pos - 2);
    ASSERT_TRUE(operand_ok(a_text) && operand_ok(b_text)) << e.prompt;
    ASSERT_EQ(a_text.find_first_not_of("0123456789"), std::string::npos) << e.prompt;
    ASSERT_EQ(b_text.find_first_not_of("0123456789"), std::string::npos) << e.prompt;
    const int64_t a = std::stoll(a_text), b = std::stoll(b_text);
    const char op = e.prompt[op_pos];
    ops.insert(op);
    const int64_t expected = op == '+' ? a + b : op == '-' ? a - b : a * b;
    EXPECT_EQ(e.answer, std::to_string(expected)) << e.prompt;
    negative |= expected < 0;
    EXPECT_NO_THROW(tok.encode(e.prompt + e.answer));
  }
  EXPECT_EQ(ops, (std::set<char>{'+', '-', '*'}));
  EXPECT_TRUE(negative);
}

TEST(ArithmeticTask, OneDigitOperandsIncludeZero) {
  ArithmeticTaskConfig c = small_config();
  c.max_operand_digits = 1;
  c.val_size = 10;
  const ArithmeticTask task(c);
  bool zero = false;
  for (const Example& e : task.train()) zero |= e.prompt.starts_with("0");
  EXPECT_TRUE(zero);
  EXPECT_EQ(task.num_possible_prompts(), 300u);
}

TEST(ArithmeticTask, LargestOperandsAreExact) {
  EXPECT_EQ(arithmetic_answer(999999999, '*', 999999999), "999999998000000001");
  EXPECT_EQ(arithmetic_answer(3, '-', 15), "-12");
  EXPECT_EQ(arithmetic_answer(0, '-', 0), "0");
}

TEST(ArithmeticReward, ExactAnswerUpToTheFirstNonAnswerCharacter) {
  const Example pos{"123+456=", "579", {}};
  const Example neg{"3-15=", "-12", {}};
  const Example zero{"0*7=", "0", {}};
  EXPECT_EQ(arithmetic_reward(pos, "579"), 1.0);
  EXPECT_EQ(arithmetic_reward(pos, "579 because"), 1.0);
  EXPECT_EQ(arithmetic_reward(pos, "579\n"), 1.0);
  EXPECT_EQ(arithmetic_reward(pos, "57"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, "5790"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, "0579"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, " 579"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, "+579"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, "-579"), 0.0);
  EXPECT_EQ(arithmetic_reward(pos, ""), 0.0);
  EXPECT_EQ(arithmetic_reward(neg, "-12"), 1.0);
  EXPECT_EQ(arithmetic_reward(neg, "12"), 0.0);
  EXPECT_EQ(arithmetic_reward(neg, "-"), 0.0);
  EXPECT_EQ(arithmetic_reward(zero, "0"), 1.0);
  EXPECT_EQ(arithmetic_reward(zero, "-0"), 0.0);
  EXPECT_EQ(arithmetic_reward(zero, "00"), 0.0);
  const ArithmeticTask task(small_config());
  for (const Example& e : task.validation()) EXPECT_EQ(task.reward(e, e.answer), 1.0);
}

TEST(ArithmeticTask, BadConfigsNameTheField) {
  ArithmeticTaskConfig c = small_config();
  c.min_operand_digits = 3;
  c.max_operand_digits = 2;
  EXPECT_THAT(error_of(c), HasSubstr("min_operand_digits <= max_operand_digits <= 9, got min 3 and max 2"));
  c = small_config();
  c.max_operand_digits = 10;
  EXPECT_THAT(error_of(c), HasSubstr("got min 1 and max 10"));
  c = small_config();
  c.operators = "+/";
  EXPECT_THAT(error_of(c), HasSubstr("operators \"+/\" contains '/'"));
  c.operators = "++";
  EXPECT_THAT(error_of(c), HasSubstr("lists '+' twice"));
  c.operators = "";
  EXPECT_THAT(error_of(c), HasSubstr("operators is empty"));
  c = small_config();
  c.max_operand_digits = 1;
  c.operators = "+";
  c.val_size = 60;  // of 100 possible prompts
  EXPECT_THAT(error_of(c), HasSubstr("val_size 60 needs more than half of the 100 possible prompts"));
}

TEST(ArithmeticTask, ConfigBindsToTheSchema) {
  ConfigSchema schema;
  ArithmeticTaskConfig c;
  bind_arithmetic_task_config(schema, "task.arithmetic", c);
  schema.load_overrides({"task.arithmetic.max_operand_digits=2", "task.arithmetic.operators=+", "task.arithmetic.seed=3"});
  EXPECT_EQ(c.max_operand_digits, 2);
  EXPECT_EQ(c.operators, "+");
  EXPECT_EQ(c.seed, 3u);
  EXPECT_EQ(c.min_operand_digits, 1);
  EXPECT_THROW(schema.load_overrides({"task.arithmetic.max_operand_digits=10"}), Error);
}

}  // namespace
}  // namespace fp8rl
