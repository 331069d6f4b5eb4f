// Portable quantizer inner loops: plain C++ on the scalar codec, for any x86-64 CPU.
#include <algorithm>
#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/e4m3.h"
#include "numerics/quantize_kernels.h"

namespace fp8rl::detail {
namespace {

inline float load_f32(const float* x, int64_t i) { return x[i]; }
inline float load_f32(const bf16_t* x, int64_t i) { return bf16_to_f32(x[i]); }
inline uint32_t abs_bits(float v) { return std::bit_cast<uint32_t>(v) & 0x7FFFFFFFu; }

inline void store(float* out, int64_t i, float v) { out[i] = v; }
inline void store(bf16_t* out, int64_t i, float v) { out[i] = f32_to_bf16(v); }

template <typename T>
void amax_bits_blocks(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* amax) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c0 = 0; c0 < cols; c0 += 128) {
      uint32_t m = amax[c0 / 128];
      for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) m = std::max(m, abs_bits(load_f32(x + r * ld, c)));
      amax[c0 / 128] = m;
    }
  }
}

template <typename T>
void amax_bits_accumulate(const void* xv, int64_t n, uint32_t* acc) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t i = 0; i < n; ++i) acc[i] = std::max(acc[i], abs_bits(load_f32(x, i)));
}

template <typename T>
void scale_encode_blocks(const void* xv, int64_t n, const float* qs, uint8_t* out, bool /*streaming*/) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t i0 = 0; i0 < n; i0 += 128) {
    const float q = qs[i0 / 128];
    for (int64_t i = i0; i < std::min(n, i0 + 128); ++i) out[i] = f32_to_e4m3(load_f32(x, i) * q);
  }
}

template <typename T>
void scale_encode_each(const void* xv, int64_t n, const float* qs, uint8_t* out) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e4m3(load_f32(x, i) * qs[i]);
}

template <typename T>
void amax_bits_rows_and_cols(const void* xv, int64_t ld, int64_t rows, int64_t cols, uint32_t* col_amax,
                             uint32_t* row_amax, int64_t row_ld) {
  const T* x = static_cast<const T*>(xv);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const uint32_t a = abs_bits(load_f32(x + r * ld, c));
      col_amax[c] = std::max(col_amax[c], a);
      uint32_t& block = row_amax[r * row_ld + c / 128];
      block = std::max(block, a);
    }
}

template <typename T>
void scale_encode_blocks_and_each(const void* xv, int64_t n, const float* qs, uint8_t* out, const float* qs_each,
                                  uint8_t* out_each) {
  scale_encode_blocks<T>(xv, n, qs, out, /*streaming=*/false);
  scale_encode_each<T>(xv, n, qs_each, out_each);
}

template <typename T>
void decode_scale(const uint8_t* q, int64_t n, float s, void* outv) {
  T* out = static_cast<T*>(outv);
  for (int64_t i = 0; i < n; ++i) store(out, i, e4m3_to_f32(q[i]) * s);
}

template <typename T>
void decode_scale_each(const uint8_t* q, int64_t n, const float* s, void* outv) {
  T* out = static_cast<T*>(outv);
  for (int64_t i = 0; i < n; ++i) store(out, i, e4m3_to_f32(q[i]) * s[i]);
}

template <typename T>
constexpr SourceKernels source_kernels() {
  return {amax_bits_blocks<T>,        amax_bits_accumulate<T>,    scale_encode_blocks<T>,
          scale_encode_each<T>,       amax_bits_rows_and_cols<T>, scale_encode_blocks_and_each<T>};
}
template <typename T>
constexpr DestKernels dest_kernels() {
  return {decode_scale<T>, decode_scale_each<T>};
}

}  // namespace

const QuantizeKernels& quantize_kernels_portable() {
  static constexpr QuantizeKernels kernels = {source_kernels<float>(), source_kernels<bf16_t>(),
                                              dest_kernels<float>(), dest_kernels<bf16_t>()};
  return kernels;
}

}  // namespace fp8rl::detail
