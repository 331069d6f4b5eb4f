// Owned, 64-byte-aligned, zero-initialised storage for trivially copyable elements.
// Move-only: copies are explicit (`clone()`), so a deep copy never happens by accident.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace fp8rl {

inline constexpr size_t kBufferAlignment = 64;

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size) : size_(size), capacity_(size) {
    if (size == 0) return;
    // Round the byte count up to the alignment, as aligned_alloc requires.
    const size_t bytes = (size * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
    data_ = static_cast<T*>(std::aligned_alloc(kBufferAlignment, bytes));
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(static_cast<void*>(data_), 0, bytes);
  }
  ~AlignedBuffer() { std::free(data_); }

  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      std::free(data_);
      data_ = std::exchange(other.data_, nullptr);
      size_ = std::exchange(other.size_, 0);
      capacity_ = std::exchange(other.capacity_, 0);
    }
    return *this;
  }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  AlignedBuffer clone() const {
    AlignedBuffer copy(size_);
    if (size_ != 0) std::memcpy(static_cast<void*>(copy.data_), data_, size_ * sizeof(T));
    return copy;
  }

  // Makes the buffer hold `size` elements. Within the capacity the storage is kept and the
  // elements are left as they are (callers overwrite what they read); beyond it, a new zeroed
  // buffer replaces the old one.
  void resize(size_t size) {
    if (size <= capacity_) {
      size_ = size;
      return;
    }
    *this = AlignedBuffer(size);
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  T& operator[](size_t i) { return data_[i]; }
  const T& operator[](size_t i) const { return data_[i]; }
  T* begin() { return data_; }
  T* end() { return data_ + size_; }
  const T* begin() const { return data_; }
  const T* end() const { return data_ + size_; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace fp8rl
