// ctest-file-label: quick
#include "io/atomic_file.h"

#include <gtest/gtest.h>

#include <stdexcept>

#include "core/check.h"
#include "tests/test_temp_dir.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using testing::read_file_bytes;
using testing::TempDir;

// Names in `dir` other than `keep`: what a failed or finished write must not leave behind.
std::vector<std::string> entries(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(AtomicFile, WritesAndReplacesWithoutLeavingTemporaries) {
  TempDir tmp;
  write_file_atomic(tmp / "a.txt", "first");
  EXPECT_EQ(read_file_bytes(tmp / "a.txt"), "first");
  write_file_atomic(tmp / "a.txt", "second, longer");
  EXPECT_EQ(read_file_bytes(tmp / "a.txt"), "second, longer");
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"a.txt"});
  const auto perms = fs::status(tmp / "a.txt").permissions();
  EXPECT_NE(perms & fs::perms::others_read, fs::perms::none);
}

TEST(AtomicFile, UncommittedWriterLeavesTargetUntouched) {
  TempDir tmp;
  write_file_atomic(tmp / "a.txt", "old");
  {
    AtomicFileWriter writer(tmp / "a.txt");
    writer.write("partial new contents");
    EXPECT_TRUE(fs::exists(writer.temporary_path()));
    // destroyed without commit, e.g. by an exception
  }
  EXPECT_EQ(read_file_bytes(tmp / "a.txt"), "old");
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"a.txt"});
}

TEST(AtomicFile, MissingDirectoryIsAClearError) {
  TempDir tmp;
  try {
    write_file_atomic(tmp / "no_such_dir" / "a.txt", "x");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no_such_dir/a.txt"), std::string::npos) << e.what();
  }
}

TEST(AtomicDirectory, PublishesAndReplacesAtomically) {
  TempDir tmp;
  const fs::path ckpt = tmp / "step_10";
  publish_directory_atomic(ckpt, [](const fs::path& d) {
    write_file_atomic(d / "model.safetensors", "v1");
    fs::create_directories(d / "sub");
    write_file_atomic(d / "sub" / "x", "y");
  });
  EXPECT_EQ(read_file_bytes(ckpt / "model.safetensors"), "v1");
  EXPECT_EQ(read_file_bytes(ckpt / "sub" / "x"), "y");
  publish_directory_atomic(ckpt, [](const fs::path& d) { write_file_atomic(d / "model.safetensors", "v2"); });
  EXPECT_EQ(read_file_bytes(ckpt / "model.safetensors"), "v2");
  EXPECT_FALSE(fs::exists(ckpt / "sub")) << "the old directory's contents must be gone";
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"step_10"});
}

TEST(AtomicDirectory, FailureInFillLeavesOldDirectoryAndNoTemporary) {
  TempDir tmp;
  const fs::path ckpt = tmp / "latest";
  publish_directory_atomic(ckpt, [](const fs::path& d) { write_file_atomic(d / "a", "old"); });
  EXPECT_THROW(publish_directory_atomic(ckpt,
                                        [](const fs::path& d) {
                                          write_file_atomic(d / "a", "new");
                                          throw std::runtime_error("disk full, say");
                                        }),
               std::runtime_error);
  EXPECT_EQ(read_file_bytes(ckpt / "a"), "old");
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"latest"});
}

TEST(AtomicDirectory, StaleTemporariesAreRemoved) {
  TempDir tmp;
  fs::create_directories(tmp / "ckpt.tmp-abc123");
  tmp.write(".model.safetensors.tmp-xyz", "partial");
  tmp.write("ckpt_other", "keep");
  EXPECT_EQ(remove_stale_temporaries(tmp.path(), "ckpt"), 1);
  EXPECT_EQ(remove_stale_temporaries(tmp.path(), "model.safetensors"), 1);
  EXPECT_EQ(entries(tmp.path()), std::vector<std::string>{"ckpt_other"});
}

}  // namespace
}  // namespace fp8rl
