// The run-directory lock: a second holder is refused with the first one's pid; the lock goes with
// its holder (here its destructor; a dead process's lock is released by the kernel).
// ctest-file-label: quick
#include <gtest/gtest.h>
#include <unistd.h>

#include <optional>
#include <string>

#include "io/run_lock.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

TEST(RunDirectoryLock, ASecondHolderIsRefusedUntilTheFirstEnds) {
  testing::TempDir tmp;
  const auto dir = tmp.path() / "run";
  std::optional<RunDirectoryLock> first(std::in_place, dir);  // creates the directory
  const std::string message = testing::error_message([&] { RunDirectoryLock second(dir); });
  EXPECT_NE(message.find("is in use by process " + std::to_string(::getpid())), std::string::npos) << message;
  EXPECT_NE(message.find("logger.log_dir"), std::string::npos) << message;
  first.reset();
  RunDirectoryLock again(dir);  // free once the holder is gone
}

}  // namespace
}  // namespace fp8rl
