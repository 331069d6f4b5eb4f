// The terminal progress line (core/progress.h): its text, the ETA arithmetic, and what it writes.
// ctest-file-label: quick
#include "core/progress.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <string>

namespace fp8rl {
namespace {

using ::testing::EndsWith;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Progress, DurationsReadLikeAClock) {
  EXPECT_EQ(format_duration(0), "0s");
  EXPECT_EQ(format_duration(-3), "0s");
  EXPECT_EQ(format_duration(59.4), "59s");
  EXPECT_EQ(format_duration(59.6), "1m00s");
  EXPECT_EQ(format_duration(261), "4m21s");
  EXPECT_EQ(format_duration(3600 * 3 + 7 * 60 + 20), "3h07m");
}

TEST(Progress, EtaIsStepsLeftTimesTheMeanStepSoFar) {
  // Resumed at step 10: steps 11 and 12 took 5 s together; 138 steps left at 2.5 s.
  EXPECT_EQ(format_progress("grpo", 12, 150, 2, 5.0, "reward 0.500"),
            "grpo  12/150  2.50 s/step  ETA 5m45s  reward 0.500");
  EXPECT_EQ(format_progress("sft", 3, 3, 3, 0.3, ""), "sft 3/3  0.10 s/step  ETA 0s");
  EXPECT_EQ(format_progress("sft", 0, 3, 0, 0.0, "x"), "sft 0/3  x");  // nothing timed yet: no ETA
}

// What a ProgressLine writes to a file.
std::string output_of(bool enabled, void (*use)(ProgressLine&)) {
  std::FILE* f = std::tmpfile();
  {
    ProgressLine p("grpo", 0, 3, enabled, f);
    use(p);
  }
  std::rewind(f);
  std::string out;
  for (int c; (c = std::fgetc(f)) != EOF;) out.push_back(static_cast<char>(c));
  std::fclose(f);
  return out;
}

TEST(Progress, OneLineRedrawnInPlaceThenEnded) {
  const std::string out = output_of(true, [](ProgressLine& p) {
    p.update(1, "reward 0.125 and a long tail");
    p.update(2, "reward 0.250");
    p.update(3, "reward 0.500");
  });
  EXPECT_THAT(out, StartsWith("\rgrpo 1/3  "));
  EXPECT_THAT(out, HasSubstr("\rgrpo 3/3  "));
  // The last step is always drawn (blanking the rest of the longer first line), then the newline.
  const size_t last = out.rfind("  reward 0.500");
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(out.substr(last + 14), std::string(out.size() - last - 15, ' ') + "\n");
  EXPECT_EQ(out.find('\n'), out.size() - 1);  // no other newline
}

TEST(Progress, EndLineLetsOtherOutputFollowAndTheNextUpdateStartsAFreshLine) {
  const std::string out = output_of(true, [](ProgressLine& p) {
    p.update(1, "a");
    p.end_line();
    p.end_line();  // nothing open: nothing written
    p.update(2, "b");
  });
  EXPECT_THAT(out, StartsWith("\rgrpo 1/3  "));
  EXPECT_THAT(out, HasSubstr("  a\n\rgrpo 2/3  "));
  EXPECT_THAT(out, EndsWith("  b\n"));
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), 2);
}

TEST(Progress, DisabledWritesNothing) {
  EXPECT_EQ(output_of(false,
                      [](ProgressLine& p) {
                        p.update(1, "x");
                        p.end_line();
                      }),
            "");
}

}  // namespace
}  // namespace fp8rl
