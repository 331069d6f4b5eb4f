// ctest-file-label: quick
#include "tasks/running_sum.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>

#include "core/check.h"
#include "tokenizer/char_tokenizer.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

RunningSumTaskConfig config_with(int min_terms, int max_terms) {
  RunningSumTaskConfig c;
  c.min_terms = min_terms, c.max_terms = max_terms;
  c.train_size = 500, c.val_size = 50, c.seed = 3;
  return c;
}

TEST(RunningSumTask, PromptKeysEveryTermAndTheAnswerWritesEveryAddition) {
  EXPECT_EQ(running_sum_prompt({12, 7, 30, 5}), "a12+b7+c30+d5=");
  EXPECT_EQ(running_sum_answer({12, 7, 30, 5}), "0+a12=12 12+b7=19 19+c30=49 49+d5=54 #54");
  EXPECT_EQ(running_sum_answer({0, 0}), "0+a0=0 0+b0=0 #0");
  // Keys run a..z, then A..Z.
  const std::vector<int64_t> many(kRunningSumMaxTerms, 1);
  EXPECT_THAT(running_sum_prompt(many), ::testing::StartsWith("a1+b1+"));
  EXPECT_THAT(running_sum_prompt(many),
              ::testing::EndsWith("+z1+A1+B1+"
                                  "C1+D1+E1+F1+G1+H1+I1+J1+K1+L1+M1+N1+O1+P1+Q1+R1+S1+T1+U1+V1+"
                                  "W1+X1+Y1+Z1="));
  EXPECT_THAT(running_sum_answer(many), ::testing::EndsWith("51+Z1=52 #52"));
  EXPECT_THROW(running_sum_answer(std::vector<int64_t>(kRunningSumMaxTerms + 1, 1)), Error);
}

TEST(RunningSumTask, RewardScoresTheDigitsAfterTheLastHashOnly) {
  const Example e{"a12+b7+c30+d5=", "0+a12=12 12+b7=19 19+c30=49 49+d5=54 #54", {}};
  EXPECT_EQ(running_sum_reward(e, "0+a12=12 12+b7=19 19+c30=49 49+d5=54 #54"), 1.0);
  EXPECT_EQ(running_sum_reward(e, "19 48 53 #54"), 1.0);      // the working is not scored
  EXPECT_EQ(running_sum_reward(e, "#53 #54 and more"), 1.0);  // the last '#' counts
  EXPECT_EQ(running_sum_reward(e, "19 49 54 #540"), 0.0);
  EXPECT_EQ(running_sum_reward(e, "19 49 54 #5"), 0.0);
  EXPECT_EQ(running_sum_reward(e, "19 49 54 54"), 0.0);  // no '#'
  EXPECT_EQ(running_sum_reward(e, "#"), 0.0);
  EXPECT_EQ(running_sum_reward(e, ""), 0.0);
}

TEST(RunningSumTask, ExamplesAreConsistentAndTheLengthFollowsTheTermCount) {
  for (const auto& [terms, lo, hi] : {std::tuple{8, 80, 130}, std::tuple{40, 440, 600}}) {
    const RunningSumTask task(config_with(terms, terms));
    double length = 0;
    for (const Example& e : task.train()) {
      // Re-derive the answer from the prompt's terms, checking their keys.
      std::vector<int64_t> values;
      size_t at = 0;
      while (at < e.prompt.size() - 1) {
        ASSERT_EQ(e.prompt[at], kRunningSumKeys[values.size()]) << e.prompt;
        const size_t end = e.prompt.find_first_of("+=", at);
        values.push_back(std::stoll(e.prompt.substr(at + 1, end - at - 1)));
        at = end + 1;
      }
      ASSERT_EQ(static_cast<int>(values.size()), terms) << e.prompt;
      ASSERT_EQ(e.answer, running_sum_answer(values)) << e.prompt;
      EXPECT_NO_THROW(CharTokenizer().encode_prompt(e.prompt + e.answer));
      length += static_cast<double>(e.answer.size());
    }
    length /= static_cast<double>(task.train().size());
    EXPECT_GT(length, lo) << terms << " terms";
    EXPECT_LT(length, hi) << terms << " terms";
  }
}

TEST(RunningSumTask, SplitsAreDeterministicDisjointAndDistinct) {
  RunningSumTaskConfig c = config_with(2, 2);
  c.term_digits = 1;  // 100 possible prompts: collisions are certain without the rejection
  c.val_size = 30, c.train_size = 300;
  const RunningSumTask a(c), b(c);
  std::set<std::string> val;
  for (const Example& e : a.validation()) val.insert(e.prompt);
  EXPECT_EQ(val.size(), a.validation().size());
  for (size_t i = 0; i < a.train().size(); ++i) {
    EXPECT_FALSE(val.contains(a.train()[i].prompt)) << a.train()[i].prompt;
    EXPECT_EQ(a.train()[i].prompt, b.train()[i].prompt);
  }
}

TEST(RunningSumTask, BadConfigsAreRefusedNamingTheField) {
  auto error_of = [](const RunningSumTaskConfig& c) -> std::string {
    try {
      RunningSumTask task(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_THAT(error_of(config_with(9, 4)), HasSubstr("min_terms <= max_terms"));
  EXPECT_THAT(error_of(config_with(2, 53)), HasSubstr("max_terms <= 52 (one key a..z, A..Z per term)"));
  RunningSumTaskConfig digits = config_with(2, 3);
  digits.term_digits = 5;
  EXPECT_THAT(error_of(digits), HasSubstr("term_digits 5"));
  RunningSumTaskConfig tiny = config_with(2, 2);
  tiny.term_digits = 1, tiny.val_size = 101;  // only 100 prompts exist
  EXPECT_THAT(error_of(tiny), HasSubstr("lower val_size"));
}

}  // namespace
}  // namespace fp8rl
