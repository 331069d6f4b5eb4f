// TensorBoard event files: scalars that `tensorboard --logdir RUN_DIR` plots.
//
// An event file, `events.out.tfevents.<unix seconds>.<hostname>`, is a TFRecord file (TensorFlow
// guide "TFRecord and tf.train.Example", section "TFRecords format details") whose records each
// hold one serialized `Event` protocol buffer. A record is
//   uint64  length                       little-endian
//   uint32  masked CRC32C of `length`    (the 8 bytes above)
//   byte    data[length]
//   uint32  masked CRC32C of `data`
// with CRC32C the Castagnoli CRC (reflected polynomial 0x82F63B78, RFC 3720 appendix B.4) and
// mask(crc) = ((crc >> 15) | (crc << 17)) + 0xa282ead8 (mod 2^32).
//
// The messages, with the field numbers of tensorboard/compat/proto/event.proto and summary.proto
// (the same as tensorflow/core/util/event.proto and tensorflow/core/framework/summary.proto):
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }
//   Value   { string tag = 1; float simple_value = 2; }
// The first record is Event{wall_time, file_version: "brain.Event:2"}; each later one is
// Event{wall_time, step, summary} with one Value per scalar. TensorBoard merges every event file
// of a directory, so a resumed run opens a new file next to the old ones (truncate_event_files
// first drops what the old ones hold past the checkpoint it resumes from).
//
// Every error is an fp8rl::Error naming the file (and, when reading, the record and its offset).
#pragma once

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8rl {

// CRC32C (Castagnoli) of `bytes`: crc32c("123456789") == 0xE3069283.
uint32_t crc32c(std::string_view bytes);
// The TFRecord mask of a CRC: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t tfrecord_masked_crc(uint32_t crc);
// The 12 + payload.size() + 4 bytes of one TFRecord holding `payload`.
std::string tfrecord_frame(std::string_view payload);
// The payloads of every record of a TFRecord file, each record's length and both CRCs checked.
// A truncated record, a CRC mismatch or trailing bytes are errors.
std::vector<std::string> read_tfrecords(const std::filesystem::path& file);

// One scalar of an event file.
struct TfEventsScalar {
  int64_t step = 0;
  double wall_time = 0;
  std::string tag;
  float value = 0;
};

// Every simple_value scalar of an event file, in file order. Checks the framing (read_tfrecords)
// and that the first event is the file version "brain.Event:2"; fields and value kinds other than
// those written here are skipped, malformed protocol buffers are errors.
std::vector<TfEventsScalar> read_tfevents_scalars(const std::filesystem::path& file);

// Drops the events of steps after `step` from every event file in `dir`, and an incomplete last
// record (a write cut short by a crash); each file is rewritten atomically, or left untouched when
// there is nothing to drop. A resumed run calls this before it replays those steps into a file of
// its own, as it truncates metrics.jsonl to its checkpoint's step. Returns how many events (a torn
// record counting as one) were dropped. Other damage is an error naming the file.
int64_t truncate_event_files(const std::filesystem::path& dir, int64_t step);

// Seconds since the Unix epoch, as an Event's wall_time.
double unix_time_seconds();

// Appends scalar events to a new event file in a directory.
class TfEventsWriter {
 public:
  // Creates `dir` if needed and a new `events.out.tfevents.<seconds>.<hostname>` in it (with a
  // `.1`, `.2`, ... suffix should that name exist), and writes the file-version event.
  explicit TfEventsWriter(const std::filesystem::path& dir);
  ~TfEventsWriter();
  TfEventsWriter(const TfEventsWriter&) = delete;
  TfEventsWriter& operator=(const TfEventsWriter&) = delete;

  // One event at `step` holding every (tag, value) as a float32 simple_value.
  void add_scalars(int64_t step, double wall_time, const std::vector<std::pair<std::string, double>>& scalars);
  // Hands what was added to the operating system (TensorBoard then sees it).
  void flush();

  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(std::string_view payload);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
};

// The scalars of one line of metrics.jsonl or sft_metrics.jsonl: every number (and boolean, as
// 0 or 1), named by its key, the keys of nested objects joined with '/' ({"timing": {"total": 2}}
// -> "timing/total"), each tag preceded by `prefix`. The top-level "step" (the event's step),
// nulls, strings and arrays are left out.
std::vector<std::pair<std::string, double>> metrics_line_scalars(const nlohmann::ordered_json& line,
                                                                 std::string_view prefix = "");

}  // namespace fp8rl
