#include "bench/bench_report.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/timer.h"
#include "numerics/simd_target.h"

namespace fp8rl::bench {

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : 0.5 * (values[n / 2 - 1] + values[n / 2]);
}

double fastest(const std::vector<double>& gflops_runs) {
  return gflops_runs.empty() ? 0.0 : *std::max_element(gflops_runs.begin(), gflops_runs.end());
}

bool BenchOptions::wants(const std::string& group) const {
  if (groups.empty()) return true;
  size_t start = 0;
  while (start <= groups.size()) {
    const size_t end = std::min(groups.find(',', start), groups.size());
    if (groups.compare(start, end - start, group) == 0) return true;
    start = end + 1;
  }
  return false;
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

namespace {

// XOR of every word, in eight independent lanes so the loop is bound by loads, not by one
// dependency chain; the compiler vectorises it at the baseline target.
uint64_t xor_stream_portable(const uint64_t* p, size_t n) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i + 8 <= n; i += 8)
    for (size_t j = 0; j < 8; ++j) acc[j] ^= p[i + j];
  uint64_t x = 0;
  for (uint64_t a : acc) x ^= a;
  return x;
}

FP8RL_AVX512_BEGIN
// The same with 64-byte loads, four accumulators.
uint64_t xor_stream_avx512(const uint64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm512_xor_si512(a0, _mm512_load_si512(p + i));
    a1 = _mm512_xor_si512(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_xor_si512(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_xor_si512(a3, _mm512_load_si512(p + i + 24));
  }
  const __m512i x = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
  return static_cast<uint64_t>(_mm512_reduce_or_epi64(x));
}
FP8RL_AVX512_END

}  // namespace

double measure_read_bandwidth_gbps(int64_t bytes, int repeats) {
  AlignedBuffer<uint64_t> buffer(static_cast<size_t>(bytes / 8));
  for (size_t i = 0; i < buffer.size(); ++i) buffer[i] = i;
  volatile uint64_t sink = 0;
  // The limit is the faster of the portable and the AVX-512 read loops.
  double best = 0.0;
  for (Isa isa : {Isa::kPortable, Isa::kAvx512}) {
    if (isa == Isa::kAvx512 && !cpu_features().has_avx512_kernels()) continue;
    const double seconds = time_median(
        [&] {
          const uint64_t x = isa == Isa::kAvx512 ? xor_stream_avx512(buffer.data(), buffer.size())
                                                 : xor_stream_portable(buffer.data(), buffer.size());
          sink = sink ^ x;
        },
        repeats);
    best = std::max(best, static_cast<double>(buffer.size() * 8) / seconds / 1e9);
  }
  return best;
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
