// Test oracles for E4M3 written from the OCP 8-bit floating point specification (v1.0), not from
// the code under test.
#pragma once

#include <array>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fp8rl::testing {

// The value of an E4M3 "FN" code from its bit fields: (-1)^S * 2^(E-7) * (1 + M/8) for E > 0,
// (-1)^S * 2^-6 * (M/8) for E == 0, NaN for S.1111.111.
inline double ocp_e4m3_value(uint8_t code) {
  const int s = code >> 7, e = (code >> 3) & 0xF, m = code & 0x7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double magnitude = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -magnitude : magnitude;
}

// Brute-force encoder: the nearest of the 127 finite magnitudes (codes 0x00..0x7E), ties to the
// even code; magnitudes above 448 (and Inf) saturate to 448; NaN -> S.1111.111; the sign bit is
// always the input's.
inline uint8_t brute_force_e4m3(float x) {
  static const std::array<double, 127> magnitudes = [] {
    std::array<double, 127> m{};
    for (int c = 0; c < 127; ++c) m[static_cast<size_t>(c)] = ocp_e4m3_value(static_cast<uint8_t>(c));
    return m;
  }();
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | 0x7F;
  const double a = std::fabs(static_cast<double>(x));
  if (a > 448.0) return sign | 0x7E;
  int best = 0;
  double best_distance = std::numeric_limits<double>::infinity();
  for (int c = 0; c < 127; ++c) {
    const double d = std::fabs(a - magnitudes[static_cast<size_t>(c)]);
    if (d < best_distance || (d == best_distance && (c & 1) == 0)) {
      best = c;
      best_distance = d;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

}  // namespace fp8rl::testing
