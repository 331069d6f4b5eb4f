#include "io/tfevents.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <optional>

#include "core/check.h"
#include "io/atomic_file.h"

namespace fp8rl {

namespace fs = std::filesystem;

namespace {

// ---- CRC32C ------------------------------------------------------------------------------------

// table[b] = the CRC register after shifting byte b through the reflected polynomial.
constexpr std::array<uint32_t, 256> make_crc32c_table() {
  std::array<uint32_t, 256> table{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t crc = b;
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ ((crc & 1u) ? 0x82F63B78u : 0u);
    table[b] = crc;
  }
  return table;
}
constexpr std::array<uint32_t, 256> kCrc32cTable = make_crc32c_table();

// ---- little-endian integers and protobuf wire format (encoding) --------------------------------

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}
uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = 0; i < bytes; ++i) v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
  return v;
}

enum WireType : uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}
void put_key(std::string& out, uint32_t field, WireType type) { put_varint(out, (field << 3) | type); }
void put_bytes_field(std::string& out, uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes);
}

// Field numbers (event.proto, summary.proto).
constexpr uint32_t kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5;
constexpr uint32_t kSummaryValue = 1;
constexpr uint32_t kValueTag = 1, kValueSimpleValue = 2;
constexpr std::string_view kFileVersion = "brain.Event:2";
constexpr std::string_view kEventFilePrefix = "events.out.tfevents.";

std::string event_header(double wall_time) {
  std::string e;
  put_key(e, kEventWallTime, kFixed64);
  put_le(e, std::bit_cast<uint64_t>(wall_time), 8);
  return e;
}

// ---- protobuf wire format (decoding) -----------------------------------------------------------

// One field of a message: its number, wire type, and value (varint / fixed bits, or bytes).
struct WireField {
  uint32_t number = 0;
  WireType type = kVarint;
  uint64_t bits = 0;
  std::string_view bytes;
};

// Reads the fields of one serialized message; `what` names it in errors.
class WireReader {
 public:
  WireReader(std::string_view data, std::string what) : data_(data), what_(std::move(what)) {}

  std::optional<WireField> next() {
    if (pos_ == data_.size()) return std::nullopt;
    const uint64_t key = varint();
    WireField f;
    f.number = static_cast<uint32_t>(key >> 3);
    f.type = static_cast<WireType>(key & 7);
    switch (f.type) {
      case kVarint: f.bits = varint(); break;
      case kFixed64: f.bits = get_le(take(8).data(), 8); break;
      case kFixed32: f.bits = get_le(take(4).data(), 4); break;
      case kLengthDelimited: f.bytes = take(varint()); break;
      default: FP8RL_REQUIRE(false, "{}: unsupported protobuf wire type {} at byte {}", what_, key & 7, pos_);
    }
    return f;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      FP8RL_REQUIRE(pos_ < data_.size(), "{}: protobuf varint runs past the end ({} bytes)", what_, data_.size());
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      v |= static_cast<uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return v;
    }
    FP8RL_REQUIRE(false, "{}: protobuf varint longer than 10 bytes at byte {}", what_, pos_);
    return 0;
  }
  std::string_view take(uint64_t n) {
    FP8RL_REQUIRE(n <= data_.size() - pos_, "{}: protobuf field of {} bytes at byte {} runs past the end ({} bytes)",
                what_, n, pos_, data_.size());
    const std::string_view s = data_.substr(pos_, n);
    pos_ += n;
    return s;
  }

  std::string_view data_;
  std::string what_;
  size_t pos_ = 0;
};

std::string hostname() {
  std::array<char, 256> name{};
  if (::gethostname(name.data(), name.size() - 1) != 0 || name[0] == '\0') return "localhost";
  return name.data();
}

}  // namespace

// ---- TFRecord ----------------------------------------------------------------------------------

uint32_t crc32c(std::string_view bytes) {
  uint32_t crc = 0xFFFFFFFFu;
  for (const char c : bytes) crc = (crc >> 8) ^ kCrc32cTable[(crc ^ static_cast<unsigned char>(c)) & 0xFF];
  return crc ^ 0xFFFFFFFFu;
}

uint32_t tfrecord_masked_crc(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::string tfrecord_frame(std::string_view payload) {
  std::string record;
  record.reserve(16 + payload.size());
  put_le(record, payload.size(), 8);
  put_le(record, tfrecord_masked_crc(crc32c(record)), 4);
  record.append(payload);
  put_le(record, tfrecord_masked_crc(crc32c(payload)), 4);
  return record;
}

namespace {

// The records of a TFRecord file. With `torn_tail_ok`, an incomplete last record (a write cut
// short by a crash) ends the file instead of being an error; `*torn` says whether there was one.
std::vector<std::string> read_records(const fs::path& file, bool torn_tail_ok, bool* torn) {
  std::ifstream in(file, std::ios::binary);
  FP8RL_REQUIRE(in.good(), "TFRecord file '{}': cannot open ({})", file.string(), std::strerror(errno));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string> records;
  if (torn != nullptr) *torn = false;
  for (size_t pos = 0; pos < data.size();) {
    const size_t index = records.size(), left = data.size() - pos;
    const uint64_t length = left >= 12 ? get_le(&data[pos], 8) : 0;
    const bool length_ok =
        left >= 12 && get_le(&data[pos + 8], 4) == tfrecord_masked_crc(crc32c(std::string_view(&data[pos], 8)));
    if (torn_tail_ok && (left < 12 || (length_ok && (length > left - 12 || left - 12 - length < 4)))) {
      if (torn != nullptr) *torn = true;
      break;
    }
    FP8RL_REQUIRE(left >= 12, "TFRecord file '{}': record {} at byte {}: truncated header ({} bytes left)", file.string(),
                index, pos, left);
    FP8RL_REQUIRE(length_ok, "TFRecord file '{}': record {} at byte {}: length CRC mismatch (corrupt file)",
                file.string(), index, pos);
    FP8RL_REQUIRE(length <= left - 12 && left - 12 - length >= 4,
                "TFRecord file '{}': record {} at byte {}: {} data bytes + CRC announced, {} bytes left (truncated)",
                file.string(), index, pos, length, left - 12);
    const std::string_view payload(&data[pos + 12], length);
    const auto data_crc = static_cast<uint32_t>(get_le(&data[pos + 12 + length], 4));
    const uint32_t want_data_crc = tfrecord_masked_crc(crc32c(payload));
    FP8RL_REQUIRE(data_crc == want_data_crc,
                "TFRecord file '{}': record {} at byte {}: data CRC {:#010x}, expected {:#010x} (corrupt file)",
                file.string(), index, pos, data_crc, want_data_crc);
    records.emplace_back(payload);
    pos += 12 + length + 4;
  }
  return records;
}

}  // namespace

std::vector<std::string> read_tfrecords(const fs::path& file) { return read_records(file, false, nullptr); }

// ---- events ------------------------------------------------------------------------------------

namespace {

// The fields of one Event that this file writes; others are skipped.
struct DecodedEvent {
  double wall_time = 0;
  int64_t step = 0;
  std::optional<std::string_view> file_version;       // views into the payload
  std::vector<std::pair<std::string, float>> values;  // (tag, simple_value)
};

DecodedEvent decode_event(std::string_view payload, const std::string& what) {
  DecodedEvent e;
  WireReader event(payload, what);
  while (const auto f = event.next()) {
    if (f->number == kEventWallTime && f->type == kFixed64) e.wall_time = std::bit_cast<double>(f->bits);
    if (f->number == kEventStep && f->type == kVarint) e.step = static_cast<int64_t>(f->bits);
    if (f->number == kEventFileVersion && f->type == kLengthDelimited) e.file_version = f->bytes;
    if (f->number != kEventSummary || f->type != kLengthDelimited) continue;
    WireReader summary(f->bytes, what + " summary");
    while (const auto v = summary.next()) {
      if (v->number != kSummaryValue || v->type != kLengthDelimited) continue;
      std::string tag;
      std::optional<float> simple_value;
      WireReader value(v->bytes, what + " summary value");
      while (const auto x = value.next()) {
        if (x->number == kValueTag && x->type == kLengthDelimited) tag = x->bytes;
        if (x->number == kValueSimpleValue && x->type == kFixed32)
          simple_value = std::bit_cast<float>(static_cast<uint32_t>(x->bits));
      }
      if (simple_value) e.values.emplace_back(std::move(tag), *simple_value);
    }
  }
  return e;
}

// The events of an event file, the first checked to be the file version.
std::vector<DecodedEvent> read_events(const fs::path& file, const std::vector<std::string>& records) {
  std::vector<DecodedEvent> events;
  for (size_t r = 0; r < records.size(); ++r) {
    const std::string what = fmt::format("event file '{}': record {}", file.string(), r);
    events.push_back(decode_event(records[r], what));
    if (r == 0)
      FP8RL_REQUIRE(events[0].file_version == kFileVersion,
                  "{}: the first event must be file_version \"{}\", found \"{}\"", what, kFileVersion,
                  events[0].file_version.value_or("(none)"));
  }
  return events;
}

}  // namespace

std::vector<TfEventsScalar> read_tfevents_scalars(const fs::path& file) {
  const std::vector<std::string> records = read_tfrecords(file);
  std::vector<TfEventsScalar> scalars;
  for (DecodedEvent& e : read_events(file, records))
    for (auto& [tag, value] : e.values) scalars.push_back({e.step, e.wall_time, std::move(tag), value});
  return scalars;
}

int64_t truncate_event_files(const fs::path& dir, int64_t step) {
  std::vector<fs::path> files;  // listed first: rewriting them changes the directory
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (entry.path().filename().string().starts_with(kEventFilePrefix)) files.push_back(entry.path());
  FP8RL_REQUIRE(!ec, "cannot list the run directory '{}': {}", dir.string(), ec.message());
  int64_t dropped = 0;
  for (const fs::path& file : files) {
    bool torn = false;
    const std::vector<std::string> records = read_records(file, /*torn_tail_ok=*/true, &torn);
    const std::vector<DecodedEvent> events = read_events(file, records);
    std::string kept;
    int64_t dropped_here = torn ? 1 : 0;
    for (size_t r = 0; r < records.size(); ++r) {
      if (r == 0 || events[r].step <= step)
        kept += tfrecord_frame(records[r]);
      else
        ++dropped_here;
    }
    if (dropped_here == 0) continue;  // untouched
    write_file_atomic(file, kept);
    dropped += dropped_here;
  }
  return dropped;
}

double unix_time_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

TfEventsWriter::TfEventsWriter(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  FP8RL_REQUIRE(!ec, "cannot create the TensorBoard log directory '{}': {}", dir.string(), ec.message());
  const double now = unix_time_seconds();
  const std::string base = fmt::format("{}{}.{}", kEventFilePrefix, static_cast<int64_t>(now), hostname());
  for (int n = 0; file_ == nullptr; ++n) {
    path_ = dir / (n == 0 ? base : fmt::format("{}.{}", base, n));
    file_ = std::fopen(path_.c_str(), "wbx");  // x: fails if the name exists (C11, glibc)
    FP8RL_REQUIRE(file_ != nullptr || (errno == EEXIST && n < 1000), "cannot create the TensorBoard event file '{}': {}",
                path_.string(), std::strerror(errno));
  }
  std::string event = event_header(now);
  put_bytes_field(event, kEventFileVersion, kFileVersion);
  write_record(event);
  flush();
}

TfEventsWriter::~TfEventsWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void TfEventsWriter::add_scalars(int64_t step, double wall_time,
                                 const std::vector<std::pair<std::string, double>>& scalars) {
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    put_bytes_field(v, kValueTag, tag);
    put_key(v, kValueSimpleValue, kFixed32);
    put_le(v, std::bit_cast<uint32_t>(static_cast<float>(value)), 4);
    put_bytes_field(summary, kSummaryValue, v);
  }
  std::string event = event_header(wall_time);
  put_key(event, kEventStep, kVarint);
  put_varint(event, static_cast<uint64_t>(step));
  put_bytes_field(event, kEventSummary, summary);
  write_record(event);
}

void TfEventsWriter::flush() {
  FP8RL_REQUIRE(std::fflush(file_) == 0, "cannot write the TensorBoard event file '{}': {}", path_.string(),
              std::strerror(errno));
}

void TfEventsWriter::write_record(std::string_view payload) {
  const std::string record = tfrecord_frame(payload);
  FP8RL_REQUIRE(std::fwrite(record.data(), 1, record.size(), file_) == record.size(),
              "cannot write the TensorBoard event file '{}': {}", path_.string(), std::strerror(errno));
}

// ---- metrics -----------------------------------------------------------------------------------

namespace {

void append_json_scalars(const nlohmann::ordered_json& object, const std::string& prefix, bool top_level,
                         std::vector<std::pair<std::string, double>>& out) {
  for (const auto& [key, value] : object.items()) {
    if (top_level && key == "step") continue;
    if (value.is_number()) out.emplace_back(prefix + key, value.get<double>());
    if (value.is_boolean()) out.emplace_back(prefix + key, value.get<bool>() ? 1.0 : 0.0);
    if (value.is_object()) append_json_scalars(value, prefix + key + "/", false, out);
  }
}

}  // namespace

std::vector<std::pair<std::string, double>> metrics_line_scalars(const nlohmann::ordered_json& line,
                                                                 std::string_view prefix) {
  std::vector<std::pair<std::string, double>> out;
  append_json_scalars(line, std::string(prefix), true, out);
  return out;
}

}  // namespace fp8rl
