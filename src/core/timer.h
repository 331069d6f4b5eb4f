// Monotonic wall-clock timer for benchmarks and step-time breakdowns.
#pragma once

#include <chrono>

namespace fp8rl {

class Timer {
 public:
  Timer() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace fp8rl
