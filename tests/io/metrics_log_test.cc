// A run's metrics file: every step line is written and flushed, a failed write (here a full
// device, /dev/full) is an error naming the file and the reason, and a resumed run keeps the
// lines up to its checkpoint.
// ctest-file-label: quick
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "io/metrics_log.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

std::string contents(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(MetricsLog, AFullDiskStopsTheRunNamingTheFile) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full";
  MetricsLog log = MetricsLog::create("/dev/full");
  const std::string message = testing::error_message([&] { log.append(R"({"step": 1})"); });
  EXPECT_THAT(message, HasSubstr("metrics file '/dev/full': cannot write a step line: No space left on device"));
  EXPECT_THAT(message, HasSubstr("--resume"));
}

TEST(MetricsLog, ResumeKeepsTheLinesUpToTheCheckpoint) {
  testing::TempDir tmp;
  const auto path = tmp / "metrics.jsonl";
  {
    MetricsLog log = MetricsLog::create(path);
    for (int step = 1; step <= 5; ++step) log.append(R"({"step": )" + std::to_string(step) + "}");
  }
  EXPECT_EQ(contents(path), "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"step\": 4}\n{\"step\": 5}\n");
  int64_t kept = -1;
  {
    MetricsLog log = MetricsLog::resume(path, 3, &kept);
    log.append(R"({"step": 4})");
  }
  EXPECT_EQ(kept, 3);
  EXPECT_EQ(contents(path), "{\"step\": 1}\n{\"step\": 2}\n{\"step\": 3}\n{\"step\": 4}\n");
  // A file that lost lines reports how many it still had.
  MetricsLog::resume(path, 10, &kept);
  EXPECT_EQ(kept, 4);
  MetricsLog::resume(tmp / "none.jsonl", 2, &kept);
  EXPECT_EQ(kept, 0);
}

}  // namespace
}  // namespace fp8rl
