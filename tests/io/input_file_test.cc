// Files read on a user's say-so: a FIFO is refused at once (it used to hang), a directory is named
// as one, an overlong line is refused when the limit is reached, and lines and whole files read
// back exactly.
// ctest-file-label: quick
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "io/input_file.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

using ::testing::HasSubstr;

TEST(InputFile, RefusesFifosAndDirectoriesWithoutBlocking) {
  testing::TempDir tmp;
  const auto fifo = tmp / "pipe.jsonl";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_THAT(testing::error_message([&] { InputFile f(fifo, "dataset"); }),
              HasSubstr("dataset '" + fifo.string() + "': is a FIFO (named pipe), expected a regular file"));
  EXPECT_THAT(testing::error_message([&] { read_input_file(tmp.path(), "recipe", 100); }),
              HasSubstr("recipe '" + tmp.path().string() + "': is a directory, expected a regular file"));
  EXPECT_THAT(testing::error_message([&] { InputFile f(tmp / "missing", "tokenizer"); }),
              HasSubstr("cannot open: No such file or directory"));
}

TEST(InputFile, ReadsLinesAndRefusesOneLongerThanTheLimit) {
  testing::TempDir tmp;
  const auto path = tmp.write("a.jsonl", "one\r\n\ntwo\n" + std::string(100, 'x') + "\nlast");
  InputFile f(path, "dataset");
  std::string line;
  ASSERT_TRUE(f.read_line(line, 100, "k"));
  EXPECT_EQ(line, "one");
  ASSERT_TRUE(f.read_line(line, 100, "k"));
  EXPECT_EQ(line, "");
  ASSERT_TRUE(f.read_line(line, 100, "k"));
  EXPECT_EQ(line, "two");
  EXPECT_EQ(f.line_number(), 3);
  EXPECT_THAT(testing::error_message([&] { f.read_line(line, 99, "task.jsonl.max_line_bytes"); }),
              HasSubstr("line 4: longer than 99 bytes (the limit is task.jsonl.max_line_bytes)"));

  InputFile g(path, "dataset");
  int lines = 0;
  std::string last;
  while (g.read_line(line, 100, "k")) ++lines, last = line;
  EXPECT_EQ(lines, 5);
  EXPECT_EQ(last, "last");  // no final newline
}

TEST(InputFile, ReadsAWholeFileWithinItsLimit) {
  testing::TempDir tmp;
  const std::string bytes(200'000, 'q');
  const auto path = tmp.write("big.json", bytes);
  EXPECT_EQ(read_input_file(path, "file", bytes.size()), bytes);
  EXPECT_THAT(testing::error_message([&] { read_input_file(path, "file", bytes.size() - 1); }),
              HasSubstr("200000 bytes, more than the 199999"));
}

}  // namespace
}  // namespace fp8rl
