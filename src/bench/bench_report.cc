#include "bench/bench_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/aligned_buffer.h"
#include "core/timer.h"

namespace fp8rl::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double time_median(const std::function<void()>& fn, int repeats) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    Timer t;
    fn();
    times.push_back(t.seconds());
  }
  return median(times);
}

double measure_read_bandwidth_gbps(int64_t bytes, int repeats) {
  AlignedBuffer<uint64_t> buffer(static_cast<size_t>(bytes / 8));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = i;
  volatile uint64_t sink = 0;
  const double seconds = time_median(
      [&] {
        // Eight independent lanes so the loop is bound by loads, not by one dependency chain;
        // the compiler vectorises it at the baseline target.
        uint64_t acc[8] = {};
        const uint64_t* p = buffer.data();
        const size_t n = buffer.size() / 8 * 8;
        for (size_t i = 0; i < n; i += 8)
          for (int j = 0; j < 8; ++j) acc[j] ^= p[i + static_cast<size_t>(j)];
        uint64_t x = 0;
        for (uint64_t a : acc) x ^= a;
        sink = sink ^ x;
      },
      repeats);
  return static_cast<double>(buffer.size() * 8) / seconds / 1e9;
}

double measure_write_bandwidth_gbps(int64_t bytes, int repeats) {
  AlignedBuffer<uint64_t> buffer(static_cast<size_t>(bytes / 8));
  uint64_t value = 1;
  const double seconds = time_median(
      [&] {
        std::fill(buffer.begin(), buffer.end(), value);
        ++value;
      },
      repeats);
  return static_cast<double>(buffer.size() * 8) / seconds / 1e9;
}

void emit(const nlohmann::ordered_json& record, const BenchOptions& options) {
  if (options.json) {
    fmt::print("{}\n", record.dump());
  } else {
    std::string line = fmt::format("{}/{}", record.value("suite", "?"), record.value("case", "?"));
    for (const auto& [key, value] : record.items()) {
      if (key == "suite" || key == "case") continue;
      if (value.is_number_float()) {
        line += fmt::format("  {}={:.4g}", key, value.get<double>());
      } else {
        line += fmt::format("  {}={}", key, value.is_string() ? value.get<std::string>() : value.dump());
      }
    }
    fmt::print("{}\n", line);
  }
  std::fflush(stdout);
}

}  // namespace fp8rl::bench
