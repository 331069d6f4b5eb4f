// Tensor views and owned tensors.
//
// TensorView is non-owning: dtype, shape, strides (in elements) and a pointer. Tensor owns
// 64-byte-aligned storage and hands out contiguous row-major views of it. Up to 4 dimensions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/aligned_buffer.h"
#include "core/dtype.h"

namespace fp8rl {


inline constexpr int kMaxDims = 4;

struct Shape {
  std::array<int64_t, kMaxDims> dims{};
  int rank = 0;

  Shape() = default;
  Shape(std::initializer_list<int64_t> d);
  int64_t operator[](int i) const { return dims[static_cast<size_t>(i)]; }
  int64_t numel() const;
  bool operator==(const Shape& other) const;
  std::string str() const;  // "[2, 3]"
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  std::array<int64_t, kMaxDims> strides{};  // in elements

  // A contiguous row-major view of `data` with the given shape.
  static TensorView contiguous(void* data, DType dtype, Shape shape);
  // A 2-D view whose rows are `row_stride` elements apart (row_stride >= cols).
  static TensorView matrix(void* data, DType dtype, int64_t rows, int64_t cols, int64_t row_stride);

  int64_t numel() const { return shape.numel(); }
  int rank() const { return shape.rank; }
  bool is_contiguous() const;
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  std::string str() const;  // "f32[65, 96] strides [96, 1]"
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DType dtype, Shape shape);  // zero-initialised

  TensorView view() const { return view_; }
  DType dtype() const { return view_.dtype; }
  const Shape& shape() const { return view_.shape; }
  int64_t numel() const { return view_.numel(); }
  template <typename T>
  T* data() const {
    return view_.as<T>();
  }
  Tensor clone() const;

 private:
  AlignedBuffer<std::byte> storage_;
  TensorView view_;
};

}  // namespace fp8rl
