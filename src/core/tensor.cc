#include "core/tensor.h"

#include <fmt/format.h>

#include <cstring>

#include "core/check.h"

namespace fp8rl {

Shape::Shape(std::initializer_list<int64_t> d) {
  FP8RL_CHECK(d.size() <= kMaxDims, "shape has {} dims, at most {} supported", d.size(), kMaxDims);
  for (int64_t v : d) {
    FP8RL_CHECK(v >= 0, "negative dimension {} in shape", v);
    dims[static_cast<size_t>(rank++)] = v;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= dims[static_cast<size_t>(i)];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank != other.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (dims[static_cast<size_t>(i)] != other.dims[static_cast<size_t>(i)]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += fmt::format("{}{}", i ? ", " : "", dims[static_cast<size_t>(i)]);
  return s + "]";
}

TensorView TensorView::contiguous(void* data, DType dtype, Shape shape) {
  TensorView v;
  v.data = data;
  v.dtype = dtype;
  v.shape = shape;
  int64_t stride = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    v.strides[static_cast<size_t>(i)] = stride;
    stride *= shape[i];
  }
  return v;
}

TensorView TensorView::matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride) {
  FP8RL_CHECK(row_stride >= cols, "row stride {} is smaller than the {} columns", row_stride, cols);
  TensorView v = contiguous(data, dtype, Shape{rows, cols});
  v.strides[0] = row_stride;
  return v;
}

bool TensorView::is_contiguous() const {
  int64_t stride = 1;
  for (int i = shape.rank - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[static_cast<size_t>(i)] != stride) return false;
    stride *= shape[i];
  }
  return true;
}

std::string TensorView::str() const {
  std::string s = fmt::format("{}{} strides [", dtype_name(dtype), shape.str());
  for (int i = 0; i < shape.rank; ++i) s += fmt::format("{}{}", i ? ", " : "", strides[static_cast<size_t>(i)]);
  return s + "]";
}

Tensor::Tensor(DType dtype, Shape shape)
    : storage_(static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
      view_(TensorView::contiguous(storage_.data(), dtype, shape)) {}

Tensor Tensor::clone() const {
  Tensor copy(view_.dtype, view_.shape);
  if (!storage_.empty()) std::memcpy(copy.storage_.data(), storage_.data(), storage_.size());
  return copy;
}

}  // namespace fp8rl
