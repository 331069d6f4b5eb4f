// Owned, 64-byte-aligned, zero-initialised storage for trivially copyable elements.
// Move-only: copies are explicit (`clone()`), so a deep copy never happens by accident.
//
// Buffers of kMappedBufferBytes or more are anonymous memory maps: the kernel hands out zeroed
// pages when they are first touched, so allocating costs nothing and the resident set grows only
// with what is used (a KV cache budget, a gradient buffer before backward). From 4 MiB they ask
// for transparent huge pages (madvise), 512 times fewer page faults when they are touched.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <new>
#include <type_traits>
#include <utility>

namespace fp8rl {

inline constexpr size_t kBufferAlignment = 64;
inline constexpr size_t kMappedBufferBytes = size_t{1} << 20;
inline constexpr size_t kHugePageBufferBytes = size_t{4} << 20;

namespace detail {
// Zeroed storage of `bytes` (a multiple of kBufferAlignment); nullptr on failure.
inline void* allocate_zeroed(size_t bytes) {
  if (bytes < kMappedBufferBytes) {
    void* p = std::aligned_alloc(kBufferAlignment, bytes);
    if (p != nullptr) std::memset(p, 0, bytes);
    return p;
  }
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  if (bytes >= kHugePageBufferBytes) madvise(p, bytes, MADV_HUGEPAGE);  // a hint: failure is harmless
  return p;
}
inline void release(void* p, size_t bytes) {
  if (p == nullptr) return;
  if (bytes < kMappedBufferBytes) {
    std::free(p);
  } else {
    munmap(p, bytes);
  }
}
}  // namespace detail

template <typename T>
class AlignedBuffer {
  static_assert(std::is_trivially_copyable_v<T>);

 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t size) : size_(size), capacity_(size) {
    if (size == 0) return;
    data_ = static_cast<T*>(detail::allocate_zeroed(bytes_of(size)));
    if (data_ == nullptr) throw std::bad_alloc();
  }
  ~AlignedBuffer() { detail::release(data_, bytes_of(capacity_)); }

  AlignedBuffer(AlignedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)),
        size_(std::exchange(other.size_, 0)),
        capacity_(std::exchange(other.capacity_, 0)) {}
  AlignedBuffer& operator=(AlignedBuffer&& other) noexcept {
    if (this != &other) {
      detail::release(data_, bytes_of(capacity_));
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

  // A mapped buffer (kMappedBufferBytes or more) gives its pages back to the kernel: the resident
  // set shrinks by its size and its elements read as zeros until written again; it stays valid.
  // Returns false, doing nothing, for a smaller (heap) buffer.
  bool discard_pages() {
    if (!mapped()) return false;
    return madvise(data_, bytes_of(capacity_), MADV_DONTNEED) == 0;
  }

  // Whether the storage is an anonymous memory map (kMappedBufferBytes or more), not heap.
  bool mapped() const { return data_ != nullptr && bytes_of(capacity_) >= kMappedBufferBytes; }

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
  // The byte count of `n` elements rounded up to the alignment, as aligned_alloc requires.
  static size_t bytes_of(size_t n) {
    return (n * sizeof(T) + kBufferAlignment - 1) / kBufferAlignment * kBufferAlignment;
  }
  T* data_ = nullptr;
  size_t size_ = 0;
  size_t capacity_ = 0;
};

}  // namespace fp8rl
