#include "kernels/elementwise/rope.h"

#include <cmath>

#include "core/check.h"
#include "core/thread_pool.h"

namespace fp8rl {

RopeTable rope_table(int64_t head_dim, int64_t max_positions, double theta, const RopeScaling* scaling) {
  FP8RL_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim must be even and positive, got {}", head_dim);
  RopeTable t;
  t.max_positions = max_positions;
  t.half = head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(t.half));
  for (int64_t i = 0; i < t.half; ++i) {
    double f = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
    if (scaling != nullptr) {
      const double pi = 3.14159265358979323846;
      const double wavelen = 2.0 * pi / f;
      const double low_wavelen = scaling->original_max_position / scaling->low_freq_factor;
      const double high_wavelen = scaling->original_max_position / scaling->high_freq_factor;
      if (wavelen > low_wavelen) {
        f /= scaling->factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (scaling->original_max_position / wavelen - scaling->low_freq_factor) /
                              (scaling->high_freq_factor - scaling->low_freq_factor);
        f = (1.0 - smooth) * f / scaling->factor + smooth * f;
      }
    }
    inv_freq[static_cast<size_t>(i)] = f;
  }
  t.cos.resize(static_cast<size_t>(max_positions * t.half));
  t.sin.resize(t.cos.size());
  for (int64_t p = 0; p < max_positions; ++p) {
    for (int64_t i = 0; i < t.half; ++i) {
      const double angle = static_cast<double>(p) * inv_freq[static_cast<size_t>(i)];
      t.cos[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::cos(angle));
      t.sin[static_cast<size_t>(p * t.half + i)] = static_cast<float>(std::sin(angle));
    }
  }
  return t;
}

namespace {
// Rows [r0, r1) of rotate().
void rotate_rows(float* x, const int32_t* positions, int64_t r0, int64_t r1, int64_t n_heads, int64_t head_dim,
                 const RopeTable& table, float direction) {
  const int64_t half = head_dim / 2;
  for (int64_t r = r0; r < r1; ++r) {
    const int64_t p = positions[r];
    FP8RL_CHECK(p >= 0 && p < table.max_positions, "rope: position {} outside the table's {} positions", p,
                table.max_positions);
    const float* c = table.cos.data() + p * half;
    const float* s = table.sin.data() + p * half;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + r * n_heads * head_dim + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half];
        const float sn = direction * s[i];
        v[i] = a * c[i] - b * sn;
        v[i + half] = b * c[i] + a * sn;
      }
    }
  }
}

// Rotates every head of every row by +angle (direction 1) or -angle (direction -1); rows in
// chunks on the kernel pool (each row on its own, so the same bits on any thread).
void rotate(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim, const RopeTable& table,
            float direction) {
  const int64_t half = head_dim / 2;
  FP8RL_CHECK_EQ(half, table.half);
  parallel_for_ranges(rows, 64, [&](int64_t r0, int64_t r1) {
    rotate_rows(x, positions, r0, r1, n_heads, head_dim, table, direction);
  });
}
}  // namespace

void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
                  const RopeTable& table) {
  rotate(x, positions, rows, n_heads, head_dim, table, 1.0f);
}

void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
                   const RopeTable& table) {
  rotate(dx, positions, rows, n_heads, head_dim, table, -1.0f);
}

}  // namespace fp8rl
