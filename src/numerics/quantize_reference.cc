#include "numerics/quantize_reference.h"

#include <cmath>
#include <algorithm>
#include <limits>
#include <vector>

#include "numerics/e4m3.h"

namespace fp8rl::reference {

float quant_multiplier(float amax, ScaleFormat format) {
  float qs = 1.0f;
  if (amax != 0.0f && std::isfinite(amax)) {
    qs = 448.0f / amax;
    if (std::isinf(qs)) qs = std::numeric_limits<float>::max();
  }
  if (format == ScaleFormat::kPow2) {
    int exponent = 0;
    std::frexp(qs, &exponent);  // qs = m * 2^exponent, m in [0.5, 1)
    qs = std::ldexp(1.0f, exponent - 1);
  }
  return qs;
}

namespace {

struct Tile {
  int64_t rows, cols;
};

Tile tile_of(ScalingMode mode, int64_t rows, int64_t cols) {
  switch (mode) {
    case ScalingMode::kPerTensor: return {rows, cols};
    case ScalingMode::kRows1x128: return {1, 128};
    case ScalingMode::kCols128x1: return {128, 1};
    case ScalingMode::kBlocks128x128: return {128, 128};
  }
  return {1, 1};
}

}  // namespace

QuantizedMatrix quantize(const float* src, int64_t rows, int64_t cols, ScalingMode mode, ScaleFormat format) {
  QuantizedMatrix q(mode, rows, cols);
  const Tile tile = tile_of(mode, rows, cols);
  const ScaleShape grid = q.scales();
  for (int64_t tr = 0; tr < grid.rows; ++tr) {
    for (int64_t tc = 0; tc < grid.cols; ++tc) {
      // The tile's valid elements (edge tiles are partial; padding never enters the amax).
      const int64_t r_begin = tr * tile.rows, r_end = std::min(rows, r_begin + tile.rows);
      const int64_t c_begin = tc * tile.cols, c_end = std::min(cols, c_begin + tile.cols);
      float amax = 0.0f;
      bool has_nan = false;
      for (int64_t r = r_begin; r < r_end; ++r) {
        for (int64_t c = c_begin; c < c_end; ++c) {
          const float a = std::fabs(src[r * cols + c]);
          if (std::isnan(a)) {
            has_nan = true;
          } else {
            amax = std::max(amax, a);
          }
        }
      }
      if (has_nan) amax = std::numeric_limits<float>::quiet_NaN();
      const float qs = quant_multiplier(amax, format);
      q.scale_inv[static_cast<size_t>(tr * grid.cols + tc)] = 1.0f / qs;
      for (int64_t r = r_begin; r < r_end; ++r)
        for (int64_t c = c_begin; c < c_end; ++c) q.codes[static_cast<size_t>(r * cols + c)] = f32_to_e4m3(src[r * cols + c] * qs);
    }
  }
  return q;
}

QuantizedMatrix quantize(const bf16_t* src, int64_t rows, int64_t cols, ScalingMode mode, ScaleFormat format) {
  std::vector<float> wide(static_cast<size_t>(rows * cols));
  for (size_t i = 0; i < wide.size(); ++i) wide[i] = bf16_to_f32(src[i]);
  return quantize(wide.data(), rows, cols, mode, format);
}

void dequantize(const QuantizedMatrix& q, float* out) {
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      out[r * q.cols + c] = e4m3_to_f32(q.codes[static_cast<size_t>(r * q.cols + c)]) * q.scale_at(r, c);
}

}  // namespace fp8rl::reference
