// TensorBoard event files (io/tfevents.h): CRC32C against the published check values, the
// TFRecord framing and our reader against our writer (and against corrupt files), and both
// directions against an independent implementation (tools/oracles/tfevents_check.js: the
// @roboflow/tfrecords framing and CRC, protobufjs decoding), run with Node.js.
// ctest-file-label: quick
#include "io/tfevents.h"

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <fstream>
#include <limits>

#include "tests/io/tfevents_oracle.h"
#include "tests/test_temp_dir.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

std::string bytes_of(std::initializer_list<int> values) {
  std::string s;
  for (int v : values) s.push_back(static_cast<char>(v));
  return s;
}

// RFC 3720 (iSCSI) appendix B.4, and the customary check value of "123456789".
TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);
  EXPECT_EQ(crc32c(std::string(32, '\xFF')), 0x62A8AB43u);
  std::string up, down;
  for (int i = 0; i < 32; ++i) up.push_back(static_cast<char>(i)), down.push_back(static_cast<char>(31 - i));
  EXPECT_EQ(crc32c(up), 0x46DD794Eu);
  EXPECT_EQ(crc32c(down), 0x113FDB5Cu);
  const std::string read10_pdu =
      bytes_of({0x01, 0xc0, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                0x14, 0x00, 0x00, 0x00, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x14, 0x00, 0x00, 0x00, 0x18,
                0x28, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00});
  EXPECT_EQ(crc32c(read10_pdu), 0xD9963A56u);
}

TEST(TfRecord, MaskAndFrameLayout) {
  EXPECT_EQ(tfrecord_masked_crc(0), 0xa282ead8u);
  EXPECT_EQ(tfrecord_masked_crc(0x80000000u), 0xa282ead8u + 0x00010000u);  // bit 31 -> bit 16
  EXPECT_EQ(tfrecord_masked_crc(0x00008000u), 0xa282ead8u + 0x00000001u);  // bit 15 -> bit 0
  EXPECT_EQ(tfrecord_masked_crc(0x00000001u), 0xa282ead8u + 0x00020000u);  // bit 0 -> bit 17
  const std::string r = tfrecord_frame("abc");
  ASSERT_EQ(r.size(), 8u + 4u + 3u + 4u);
  EXPECT_EQ(r.substr(0, 8), bytes_of({3, 0, 0, 0, 0, 0, 0, 0}));  // u64 little-endian length
  auto u32_at = [&](size_t i) {
    uint32_t v = 0;
    for (int b = 0; b < 4; ++b) v |= static_cast<uint32_t>(static_cast<unsigned char>(r[i + b])) << (8 * b);
    return v;
  };
  EXPECT_EQ(u32_at(8), tfrecord_masked_crc(crc32c(r.substr(0, 8))));
  EXPECT_EQ(r.substr(12, 3), "abc");
  EXPECT_EQ(u32_at(15), tfrecord_masked_crc(crc32c("abc")));
}

TEST(TfRecord, ReaderReturnsWhatTheFramingHolds) {
  testing::TempDir tmp;
  const std::vector<std::string> payloads = {"", "x", std::string(300, '\x80'), bytes_of({0, 1, 2, 0})};
  std::string file;
  for (const auto& p : payloads) file += tfrecord_frame(p);
  EXPECT_EQ(read_tfrecords(tmp.write("r.tfrecord", file)), payloads);
  EXPECT_TRUE(read_tfrecords(tmp.write("empty.tfrecord", "")).empty());
}

TEST(TfRecord, CorruptFilesAreErrorsNamingTheRecord) {
  testing::TempDir tmp;
  const std::string good = tfrecord_frame("first") + tfrecord_frame("second");
  const size_t second = 8 + 4 + 5 + 4;
  auto read_error = [&](const std::string& bytes) {
    const fs::path p = tmp.write("bad.tfrecord", bytes);
    return testing::error_message([&] { read_tfrecords(p); });
  };
  std::string data_flip = good;
  data_flip[second + 12] ^= 1;
  EXPECT_THAT(read_error(data_flip), HasSubstr("record 1 at byte 21: data CRC"));
  EXPECT_THAT(read_error(data_flip), HasSubstr("bad.tfrecord"));
  std::string length_flip = good;
  length_flip[second] ^= 1;
  EXPECT_THAT(read_error(length_flip), HasSubstr("record 1 at byte 21: length CRC"));
  EXPECT_THAT(read_error(good.substr(0, good.size() - 1)), HasSubstr("record 1 at byte 21: 6 data bytes + CRC"));
  EXPECT_THAT(read_error(good + "1234"), HasSubstr("record 2 at byte 43: truncated header"));
  EXPECT_THAT(testing::error_message([&] { read_tfrecords(tmp / "missing"); }), HasSubstr("cannot open"));
}

// Awkward scalars: doubles that round, negative zero, the largest and the smallest float32, a
// double past float32's range, NaN and -inf, a step past 2^32, a tag whose length needs a two-byte
// varint, an event without scalars.
const std::vector<std::pair<int64_t, std::vector<std::pair<std::string, double>>>> kAwkward = {
    {0, {{"reward_mean", 0.1}, {"timing/total", 2.5}, {"zero", -0.0}}},
    {1, {{"max", 3.4028234663852886e38}, {"denormal", 1.401298464324817e-45}, {"overflow", 1e300}}},
    {2, {{"nan", std::numeric_limits<double>::quiet_NaN()}, {"-inf", -std::numeric_limits<double>::infinity()}}},
    {int64_t{1} << 40, {{std::string(200, 't'), -1.0 / 3.0}}},
    {3, {}},
};

std::vector<TfEventsScalar> expected_awkward() {
  std::vector<TfEventsScalar> want;
  for (const auto& [step, scalars] : kAwkward)
    for (const auto& [tag, value] : scalars) want.push_back({step, 0, tag, static_cast<float>(value)});
  return want;
}

fs::path write_awkward(const fs::path& dir) {
  TfEventsWriter w(dir);
  for (const auto& [step, scalars] : kAwkward) w.add_scalars(step, 1.7e9 + static_cast<double>(step), scalars);
  w.flush();
  return w.path();
}

void expect_same_scalars(const std::vector<TfEventsScalar>& got, const std::vector<TfEventsScalar>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].step, want[i].step) << i;
    EXPECT_EQ(got[i].tag, want[i].tag) << i;
    EXPECT_EQ(std::bit_cast<uint32_t>(got[i].value), std::bit_cast<uint32_t>(want[i].value))
        << got[i].tag << ": " << got[i].value << " vs " << want[i].value;
  }
}

TEST(TfEventsWriter, OurReaderReadsBackEveryScalar) {
  testing::TempDir tmp;
  const fs::path file = write_awkward(tmp / "logs");
  const std::string name = file.filename().string();  // events.out.tfevents.<10 digits>.<hostname>
  EXPECT_TRUE(name.starts_with("events.out.tfevents.") && name.size() > 31 && name[30] == '.' &&
              std::all_of(name.begin() + 20, name.begin() + 30, [](char c) { return c >= '0' && c <= '9'; }))
      << name;
  const std::vector<TfEventsScalar> got = read_tfevents_scalars(file);
  expect_same_scalars(got, expected_awkward());
  EXPECT_EQ(got.front().wall_time, 1.7e9);
}

TEST(TfEventsWriter, EachWriterOpensItsOwnFile) {
  testing::TempDir tmp;
  TfEventsWriter a(tmp.path()), b(tmp.path()), c(tmp.path());  // most likely within one second
  EXPECT_NE(a.path(), b.path());
  EXPECT_NE(b.path(), c.path());
  a.add_scalars(1, 0, {{"a", 1}});
  b.add_scalars(2, 0, {{"b", 2}});
  a.flush(), b.flush();
  expect_same_scalars(read_tfevents_scalars(a.path()), {{1, 0, "a", 1.0f}});
  expect_same_scalars(read_tfevents_scalars(b.path()), {{2, 0, "b", 2.0f}});
  EXPECT_TRUE(read_tfevents_scalars(c.path()).empty());  // the file-version event only
}

TEST(TfEventsWriter, ErrorsNameTheFile) {
  testing::TempDir tmp;
  const fs::path not_a_dir = tmp.write("plain_file", "x");
  EXPECT_THAT(testing::error_message([&] { TfEventsWriter w(not_a_dir); }), HasSubstr("plain_file"));
  EXPECT_THAT(testing::error_message([&] { TfEventsWriter w(not_a_dir / "sub"); }), HasSubstr("plain_file/sub"));
  const fs::path not_events = tmp.write("x.tfevents", tfrecord_frame(bytes_of({0x1a, 1, 'x'})));
  EXPECT_THAT(testing::error_message([&] { read_tfevents_scalars(not_events); }),
              HasSubstr("first event must be file_version \"brain.Event:2\", found \"x\""));
  const fs::path bad_proto = tmp.write("y.tfevents", tfrecord_frame(bytes_of({0x1a, 5, 'x'})));
  EXPECT_THAT(testing::error_message([&] { read_tfevents_scalars(bad_proto); }), HasSubstr("runs past the end"));
}

TEST(TfEventsTruncation, DropsStepsAfterTheResumePointAndATornTail) {
  testing::TempDir tmp;
  fs::path file;
  {
    TfEventsWriter w(tmp.path());
    for (int64_t step = 1; step <= 4; ++step) w.add_scalars(step, 0, {{"x", static_cast<double>(step)}});
    w.flush();
    file = w.path();
  }
  const std::string torn = tfrecord_frame("an event cut short").substr(0, 20);
  std::ofstream(file, std::ios::app | std::ios::binary) << torn;
  const fs::path other = tmp.write("notes.txt", "not an event file");
  EXPECT_THAT(testing::error_message([&] { read_tfevents_scalars(file); }), HasSubstr("truncated"));

  EXPECT_EQ(truncate_event_files(tmp.path(), 2), 3);  // steps 3 and 4, and the torn record
  expect_same_scalars(read_tfevents_scalars(file), {{1, 0, "x", 1.0f}, {2, 0, "x", 2.0f}});
  EXPECT_EQ(testing::read_file_bytes(other), "not an event file");
  const std::string bytes = testing::read_file_bytes(file);
  EXPECT_EQ(truncate_event_files(tmp.path(), 2), 0);  // nothing to drop: untouched
  EXPECT_EQ(testing::read_file_bytes(file), bytes);

  std::string corrupt = bytes;
  corrupt[corrupt.size() - 5] ^= 1;  // inside the last record's data: damage, not a torn write
  tmp.write(file.filename().string(), corrupt);
  EXPECT_THAT(testing::error_message([&] { truncate_event_files(tmp.path(), 1); }),
              HasSubstr(file.filename().string() + "': record 2 at byte"));
}

TEST(MetricsLineScalars, NumbersAndBooleansByKeyPathOthersLeftOut) {
  const auto line = nlohmann::ordered_json::parse(
      R"({"step": 3, "reward_mean": 0.5, "n": 7, "grad_norm": null, "ok": true, "skipped": false, "name": "x",
          "kv_scales": [[1, 2, 3]], "timing": {"total": 2.5, "inner": {"a": -1}, "s": "y"}, "val_accuracy": 0.25})");
  using Scalars = std::vector<std::pair<std::string, double>>;
  EXPECT_EQ(metrics_line_scalars(line), (Scalars{{"reward_mean", 0.5},
                                                 {"n", 7},
                                                 {"ok", 1},
                                                 {"skipped", 0},
                                                 {"timing/total", 2.5},
                                                 {"timing/inner/a", -1},
                                                 {"val_accuracy", 0.25}}));
  EXPECT_EQ(metrics_line_scalars(nlohmann::ordered_json::parse(R"({"step": 1, "loss": 2, "x": {"step": 4}})"), "sft/"),
            (Scalars{{"sft/loss", 2}, {"sft/x/step", 4}}));
}

// ---- the independent implementation -------------------------------------------------------------

// ctest-label: oracle
TEST(TfEventsOracle, IndependentReaderAgreesWithOurWriter) {
  if (const std::string why = testing::tfevents_oracle_missing(); !why.empty())
    GTEST_SKIP() << "oracle unavailable: " << why;
  testing::TempDir tmp;
  nlohmann::json dump;
  const std::vector<TfEventsScalar> got = testing::read_tfevents_with_oracle(write_awkward(tmp.path()), &dump);
  EXPECT_EQ(dump["file_version"], "brain.Event:2");
  EXPECT_EQ(dump["records"], 1 + kAwkward.size());
  expect_same_scalars(got, expected_awkward());
  for (const TfEventsScalar& s : got) EXPECT_EQ(s.wall_time, 1.7e9 + static_cast<double>(s.step)) << s.tag;
}

// ctest-label: oracle
TEST(TfEventsOracle, OurReaderAgreesWithIndependentWriter) {
  if (const std::string why = testing::tfevents_oracle_missing(); !why.empty())
    GTEST_SKIP() << "oracle unavailable: " << why;
  testing::TempDir tmp;
  const fs::path file = tmp / "events.out.tfevents.1700000000.oracle";
  testing::run_tfevents_oracle(fmt::format("write '{}'", file.string()));
  const std::vector<TfEventsScalar> got = read_tfevents_scalars(file);
  // tools/oracles/tfevents_check.js, expected_written(); wall_time = 1700000000.5 + step.
  expect_same_scalars(got, {{1, 0, "reward_mean", 0.1f},
                            {1, 0, "timing/total", 2.5f},
                            {2, 0, "reward_mean", -std::numeric_limits<float>::max()},
                            {2, 0, "val_accuracy", std::numeric_limits<float>::denorm_min()},
                            {5000000000, 0, "sft/loss", 0.0f}});
  for (const TfEventsScalar& s : got) EXPECT_EQ(s.wall_time, 1700000000.5 + static_cast<double>(s.step)) << s.tag;
}

}  // namespace
}  // namespace fp8rl
