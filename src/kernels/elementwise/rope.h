// Rotary position embeddings (the "rotate half" layout of HF Llama / Qwen3), in place.
//
// For a head vector x of size D (half = D/2) at position p, pair i < half rotates
// (x[i], x[i+half]) by the angle p * inv_freq[i], inv_freq[i] = theta^(-2i/D), optionally with
// Llama-3 frequency scaling. Tables are computed in double and rounded once to FP32, so every
// engine that builds a table from the same config gets the same bits.
#pragma once

#include <cstdint>
#include <vector>

namespace fp8rl {

// Llama-3.1 "rope_scaling" (rope_type "llama3").
struct RopeScaling {
  double factor = 8.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  double original_max_position = 8192.0;
};

struct RopeTable {
  int64_t max_positions = 0;
  int64_t half = 0;          // head_dim / 2
  std::vector<float> cos;    // [max_positions, half]
  std::vector<float> sin;    // [max_positions, half]
};

RopeTable rope_table(int64_t head_dim, int64_t max_positions, double theta, const RopeScaling* scaling);

// x [rows, n_heads * head_dim] row-major; row r is at position positions[r].
void rope_forward(float* x, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
                  const RopeTable& table);
// The inverse rotation applied to the gradient, in place.
void rope_backward(float* dx, const int32_t* positions, int64_t rows, int64_t n_heads, int64_t head_dim,
                   const RopeTable& table);

}  // namespace fp8rl
