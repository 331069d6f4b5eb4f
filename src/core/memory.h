// The process's memory as the kernel counts it: resident set now and at its peak. Runs report
// the peak (metrics.jsonl's `peak_rss_gib`, the end-of-run line) because memory is a budget.
#pragma once

#include <cstdint>

namespace fp8rl {

// Peak resident set size of this process so far (getrusage's ru_maxrss), in bytes.
int64_t peak_rss_bytes();
// Resident set size now (/proc/self/statm), in bytes; 0 where it cannot be read.
int64_t current_rss_bytes();
// Memory the machine can still give a process (/proc/meminfo MemAvailable + SwapFree), in bytes;
// 0 where it cannot be read.
int64_t available_memory_bytes();
// Bytes as GiB, for reports.
inline double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

}  // namespace fp8rl
