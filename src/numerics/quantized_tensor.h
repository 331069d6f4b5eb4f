// A blockwise-quantized FP8 tensor: E4M3 codes, FP32 dequantization scales, the scaling mode,
// and optionally a second, column-wise copy made from the same high-precision source.
//
// For a source matrix of shape [rows, cols] (row-major), the row-wise copy stores
//   codes      [rows, cols]                  row-major, for every mode
//   scale_inv  per mode (row-major):
//     kPerTensor      [1, 1]
//     kRows1x128      [rows, ceil(cols/128)]        one scale per row per 128 columns
//     kCols128x1      [ceil(rows/128), cols]        one scale per column per 128 rows
//     kBlocks128x128  [ceil(rows/128), ceil(cols/128)]
// The column-wise copy holds the *transpose*: codes [cols, rows] row-major, quantized along the
// source's rows, so a GEMM that reduces over the source's rows (wgrad: dW = dY^T X reduces over
// tokens) reads contiguous 128-element blocks. Its mode, as a tensor of shape [cols, rows]:
//     source kPerTensor     -> kPerTensor      (same scale)
//     source kRows1x128     -> kRows1x128      (= the source's 128x1 blocks along rows)
//     source kCols128x1     -> kRows1x128      (= the transpose of the row-wise copy)
//     source kBlocks128x128 -> kBlocks128x128  (the same blocks, transposed)
// Each copy is bit-identical to quantizing the transposed source directly with that mode.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "core/aligned_buffer.h"
#include "numerics/scale.h"

namespace fp8rl {

enum class ScalingMode : uint8_t {
  kPerTensor,
  kRows1x128,
  kCols128x1,
  kBlocks128x128,
};

inline constexpr int64_t kQuantBlock = 128;

const char* scaling_mode_name(ScalingMode mode);

// Number of scale rows and columns of a [rows, cols] tensor in `mode`.
struct ScaleShape {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t numel() const { return rows * cols; }
};
inline ScaleShape scale_shape(ScalingMode mode, int64_t rows, int64_t cols) {
  const auto blocks = [](int64_t n) { return (n + kQuantBlock - 1) / kQuantBlock; };
  switch (mode) {
    case ScalingMode::kPerTensor: return {1, 1};
    case ScalingMode::kRows1x128: return {rows, blocks(cols)};
    case ScalingMode::kCols128x1: return {blocks(rows), cols};
    case ScalingMode::kBlocks128x128: return {blocks(rows), blocks(cols)};
  }
  return {};  // not a mode: no scales (QuantizedMatrix's constructor refuses one)
}

// The mode of the column-wise (transposed) copy for a source quantized in `mode`.
ScalingMode columnwise_mode(ScalingMode mode);

// One quantized copy: codes and scales of a [rows, cols] matrix.
struct QuantizedMatrix {
  ScalingMode mode = ScalingMode::kRows1x128;
  int64_t rows = 0;
  int64_t cols = 0;
  AlignedBuffer<uint8_t> codes;    // [rows, cols] row-major E4M3 codes
  AlignedBuffer<float> scale_inv;  // scale_shape(mode, rows, cols), row-major

  QuantizedMatrix() = default;
  QuantizedMatrix(ScalingMode mode, int64_t rows, int64_t cols);  // zeroed storage
  // The same mode at a new shape, keeping the storage when it is large enough (the contents are
  // then unspecified: a quantizer overwrites all of them).
  void reshape(int64_t rows, int64_t cols);
  ScaleShape scales() const { return scale_shape(mode, rows, cols); }
  // Dequantization scale that applies to element (r, c) (inline: the GEMM packers read one per
  // row and 128-slice).
  float scale_at(int64_t r, int64_t c) const {
    const int64_t scale_cols = scales().cols;
    switch (mode) {
      case ScalingMode::kPerTensor: return scale_inv[0];
      case ScalingMode::kRows1x128: return scale_inv[static_cast<size_t>(r * scale_cols + c / kQuantBlock)];
      case ScalingMode::kCols128x1: return scale_inv[static_cast<size_t>((r / kQuantBlock) * scale_cols + c)];
      case ScalingMode::kBlocks128x128:
        return scale_inv[static_cast<size_t>((r / kQuantBlock) * scale_cols + c / kQuantBlock)];
    }
    return 0.0f;
  }
  QuantizedMatrix clone() const;
  std::string str() const;  // "kRows1x128 [65, 96] scales [65, 1]"
};

struct QuantizedTensor {
  ScaleFormat scale_format = ScaleFormat::kFp32;
  QuantizedMatrix rowwise;                   // [rows, cols]
  std::optional<QuantizedMatrix> columnwise;  // [cols, rows], see above

  QuantizedTensor() = default;
  QuantizedTensor(ScalingMode mode, int64_t rows, int64_t cols, ScaleFormat format, bool with_columnwise);
  void reshape(int64_t rows, int64_t cols);  // both copies, as QuantizedMatrix::reshape
  int64_t rows() const { return rowwise.rows; }
  int64_t cols() const { return rowwise.cols; }
  ScalingMode mode() const { return rowwise.mode; }
  QuantizedTensor clone() const;
};

}  // namespace fp8rl
