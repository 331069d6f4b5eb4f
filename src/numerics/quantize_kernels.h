// The inner loops of the quantizers, one table per instruction set (the ggml "type traits"
// shape). quantize.cc owns the block loops and calls these on contiguous runs of one row;
// quantize_portable.cc and quantize_avx512.cc implement them bit-identically.
#pragma once

#include <cstdint>

namespace fp8rl::detail {

// Kernels that read a source run of one dtype (FP32 or BF16), passed as `const void*`.
struct SourceKernels {
  // For a [rows, cols] region with rows `ld` elements apart: amax[b] = max(amax[b], largest |x|
  // in columns [128b, 128b + 128) of every row), as an FP32 bit pattern where a NaN anywhere
  // yields a pattern above 0x7F800000 (so it reads as non-finite). amax has ceil(cols/128) entries.
  void (*amax_bits_blocks)(const void* x, int64_t ld, int64_t rows, int64_t cols, uint32_t* amax);
  // acc[i] = max(acc[i], bits(|x[i]|)), same NaN rule.
  void (*amax_bits_accumulate)(const void* x, int64_t n, uint32_t* acc);
  // out[i] = e4m3(x[i] * qs[i / 128]): a run of 128-element blocks with one multiplier each.
  // `streaming`: the codes may bypass the caches (non-temporal stores), for outputs too large to
  // be read back from cache anyway; the bytes are the same. The caller issues _mm_sfence before
  // anything else reads them.
  void (*scale_encode_blocks)(const void* x, int64_t n, const float* qs, uint8_t* out, bool streaming);
  // out[i] = e4m3(x[i] * qs[i])
  void (*scale_encode_each)(const void* x, int64_t n, const float* qs, uint8_t* out);
  // A 1x128 tensor's two amaxes with its column-wise copy's, in one read of a [rows, cols]
  // region (rows `ld` elements apart): col_amax[c] = max(col_amax[c], bits(|x[r][c]|) over the
  // rows) and row_amax[r * row_ld + b] = max(row_amax[r * row_ld + b], the largest bits(|x[r][c]|)
  // of columns [128b, 128b + 128)); the NaN rule of amax_bits_blocks.
  void (*amax_bits_rows_and_cols)(const void* x, int64_t ld, int64_t rows, int64_t cols, uint32_t* col_amax,
                                  uint32_t* row_amax, int64_t row_ld);
  // scale_encode_blocks(x, n, qs, out) and scale_encode_each(x, n, qs_each, out_each) in one read
  // of x (plain stores).
  void (*scale_encode_blocks_and_each)(const void* x, int64_t n, const float* qs, uint8_t* out, const float* qs_each,
                                       uint8_t* out_each);
};

// Kernels that write a dequantized run of one dtype (FP32 or BF16), passed as `void*`.
struct DestKernels {
  // out[i] = e4m3_to_f32(q[i]) * s, rounded to the destination dtype.
  void (*decode_scale)(const uint8_t* q, int64_t n, float s, void* out);
  // out[i] = e4m3_to_f32(q[i]) * s[i]
  void (*decode_scale_each)(const uint8_t* q, int64_t n, const float* s, void* out);
};

struct QuantizeKernels {
  SourceKernels from_f32;
  SourceKernels from_bf16;
  DestKernels to_f32;
  DestKernels to_bf16;
};

const QuantizeKernels& quantize_kernels_portable();
const QuantizeKernels& quantize_kernels_avx2();    // only after resolve_isa() said kAvx2 or above
const QuantizeKernels& quantize_kernels_avx512();  // only after resolve_isa() said kAvx512

}  // namespace fp8rl::detail
