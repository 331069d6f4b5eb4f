#include "numerics/quantized_tensor.h"

#include <fmt/format.h>

#include "core/check.h"

namespace fp8rl {

const char* scaling_mode_name(ScalingMode mode) {
  switch (mode) {
    case ScalingMode::kPerTensor: return "per_tensor";
    case ScalingMode::kRows1x128: return "rows_1x128";
    case ScalingMode::kCols128x1: return "cols_128x1";
    case ScalingMode::kBlocks128x128: return "blocks_128x128";
  }
  return "unknown";
}

ScalingMode columnwise_mode(ScalingMode mode) {
  return mode == ScalingMode::kCols128x1 ? ScalingMode::kRows1x128 : mode;
}

QuantizedMatrix::QuantizedMatrix(ScalingMode mode_, int64_t rows_, int64_t cols_)
    : mode(mode_), rows(rows_), cols(cols_) {
  FP8RL_CHECK(rows_ >= 0 && cols_ >= 0, "negative shape [{}, {}]", rows_, cols_);
  FP8RL_CHECK(mode_ <= ScalingMode::kBlocks128x128, "unsupported scaling mode {}", static_cast<int>(mode_));
  codes = AlignedBuffer<uint8_t>(static_cast<size_t>(rows_ * cols_));
  scale_inv = AlignedBuffer<float>(static_cast<size_t>(scale_shape(mode_, rows_, cols_).numel()));
}

void QuantizedMatrix::reshape(int64_t rows_, int64_t cols_) {
  FP8RL_CHECK(rows_ >= 0 && cols_ >= 0, "negative shape [{}, {}]", rows_, cols_);
  rows = rows_;
  cols = cols_;
  codes.resize(static_cast<size_t>(rows_ * cols_));
  scale_inv.resize(static_cast<size_t>(scale_shape(mode, rows_, cols_).numel()));
}

QuantizedMatrix QuantizedMatrix::clone() const {
  QuantizedMatrix copy;
  copy.mode = mode;
  copy.rows = rows;
  copy.cols = cols;
  copy.codes = codes.clone();
  copy.scale_inv = scale_inv.clone();
  return copy;
}

std::string QuantizedMatrix::str() const {
  const ScaleShape s = scales();
  return fmt::format("{} [{}, {}] scales [{}, {}]", scaling_mode_name(mode), rows, cols, s.rows, s.cols);
}

QuantizedTensor::QuantizedTensor(ScalingMode mode, int64_t rows, int64_t cols, ScaleFormat format,
                                 bool with_columnwise)
    : scale_format(format), rowwise(mode, rows, cols) {
  if (with_columnwise) columnwise.emplace(columnwise_mode(mode), cols, rows);
}

void QuantizedTensor::reshape(int64_t rows, int64_t cols) {
  rowwise.reshape(rows, cols);
  if (columnwise) columnwise->reshape(cols, rows);
}

QuantizedTensor QuantizedTensor::clone() const {
  QuantizedTensor copy;
  copy.scale_format = scale_format;
  copy.rowwise = rowwise.clone();
  if (columnwise) copy.columnwise = columnwise->clone();
  return copy;
}

}  // namespace fp8rl
