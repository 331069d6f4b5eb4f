// The JSONL task: reading, line-numbered errors, final-answer extraction and the verifier.
// ctest-file-label: quick
#include "tasks/jsonl_task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "core/check.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;
using testing::error_message;

TEST(JsonlTask, ReadsExamplesAndSkipsBlankLines) {
  const testing::TempDir tmp;
  const std::string path = tmp.write("ok.jsonl", "{\"prompt\": \"1+2=\", \"answer\": \"3\"}\n\n{\"prompt\": \"x\", \"answer\": \"y\"}\n");
  const auto ex = read_jsonl_examples(path);
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].prompt, "1+2=");
  EXPECT_EQ(ex[1].answer, "y");
  JsonlTask task({path, path});
  EXPECT_EQ(task.train().size(), 2u);
}

TEST(JsonlTask, MalformedLinesAreReportedWithTheirLineNumber) {
  const testing::TempDir tmp;
  const std::string bad_json = tmp.write("bad.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\"}\n{\"prompt\": \"a\",\n");
  EXPECT_THAT(error_message([&] { read_jsonl_examples(bad_json); }), HasSubstr("line 2: not valid JSON"));
  const std::string missing = tmp.write("missing.jsonl", "{\"prompt\": \"a\"}\n");
  EXPECT_THAT(error_message([&] { read_jsonl_examples(missing); }),
              HasSubstr("line 1: expected an object with a string field \"prompt\" and a string or number field \"answer\""));
  const std::string number = tmp.write("number.jsonl", "\n\n{\"prompt\": \"a\", \"answer\": [5]}\n");
  EXPECT_THAT(error_message([&] { read_jsonl_examples(number); }), HasSubstr("line 3:"));
  EXPECT_THAT(error_message([&] { read_jsonl_examples(bad_json, "question", "answer"); }),
              HasSubstr("line 1: expected an object with a string field \"question\""));
  const std::string empty = tmp.write("empty.jsonl", "\n");
  EXPECT_THAT(error_message([&] { read_jsonl_examples(empty); }), HasSubstr("no examples"));
  EXPECT_THAT(error_message([&] { read_jsonl_examples("/nonexistent/x.jsonl"); }), HasSubstr("cannot open"));
  // Nesting that would overflow the parser's stack: refused before parsing, not a crash.
  const std::string deep = tmp.write("deep.jsonl", "{\"prompt\": \"a\", \"answer\": \"b\", \"x\": " +
                                                       std::string(300000, '[') + std::string(300000, ']') + "}\n");
  EXPECT_THAT(error_message([&] { read_jsonl_examples(deep); }), HasSubstr("line 1: nested deeper than 256 levels"));
}

TEST(JsonlTask, FinalAnswerExtraction) {
  EXPECT_EQ(extract_final_answer("so the result is \\boxed{42}."), "42");
  EXPECT_EQ(extract_final_answer("\\boxed{1} then \\boxed{\\frac{1}{2}}"), "\\frac{1}{2}");
  EXPECT_EQ(extract_final_answer("first 3, then 17 apples"), "17");
  EXPECT_EQ(extract_final_answer("it is -2.5 degrees"), "-2.5");
  EXPECT_EQ(extract_final_answer("  no digits  "), "no digits");
  EXPECT_EQ(extract_final_answer("version 1.2.3"), "2.3");
}

TEST(JsonlTask, RewardComparesNumbersNumerically) {
  EXPECT_EQ(jsonl_reward("12", "the answer is 12"), 1.0);
  EXPECT_EQ(jsonl_reward("12", "\\boxed{12.0}"), 1.0);
  EXPECT_EQ(jsonl_reward(" -3 ", "x = -3"), 1.0);
  EXPECT_EQ(jsonl_reward("12", "12 or 13"), 0.0);
  EXPECT_EQ(jsonl_reward("yes", "\\boxed{yes}"), 1.0);
  EXPECT_EQ(jsonl_reward("yes", "no"), 0.0);
}

TEST(JsonlTask, Gsm8kStyleAnswersAndThousandsSeparators) {
  const std::string gsm8k = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nShe sold 48+24 = <<48+24=72>>72.\n#### 1,072";
  EXPECT_EQ(reference_final_answer(gsm8k), "1,072");
  EXPECT_EQ(reference_final_answer("so \\boxed{\\frac{1}{2}} it is"), "\\frac{1}{2}");
  EXPECT_EQ(reference_final_answer(" 7 "), "7");
  EXPECT_EQ(extract_final_answer("it costs 1,200 dollars"), "1,200");
  EXPECT_EQ(extract_final_answer("a, b, 3"), "3");
  EXPECT_EQ(jsonl_reward(gsm8k, "... in all 1072 clips"), 1.0);
  EXPECT_EQ(jsonl_reward(gsm8k, "#### 1,072"), 1.0);
  EXPECT_EQ(jsonl_reward(gsm8k, "\\boxed{1072}"), 1.0);
  EXPECT_EQ(jsonl_reward(gsm8k, "72"), 0.0);
  EXPECT_EQ(jsonl_reward("5", "1,2"), 0.0);  // "1,2" is no thousands-separated number: its last number is 2
}

TEST(JsonlTask, ChosenFieldsAndNumericAnswers) {
  const testing::TempDir tmp;
  const std::string path =
      tmp.write("gsm.jsonl", "{\"question\": \"What is 2+2?\", \"answer\": \"2+2=4\\n#### 4\"}\n"
                             "{\"question\": \"And 3*3?\", \"answer\": 9, \"extra\": true}\n");
  const auto ex = read_jsonl_examples(path, "question", "answer");
  ASSERT_EQ(ex.size(), 2u);
  EXPECT_EQ(ex[0].prompt, "What is 2+2?");
  EXPECT_EQ(ex[1].answer, "9");
  EXPECT_EQ(jsonl_reward(ex[0].answer, "the answer is 4"), 1.0);
}

}  // namespace
}  // namespace fp8rl
