// Portable back-end of the decode GEMV: plain C++, the same per-element summation order as the
// portable GEMM back-end (gemm_portable.cc: FP32 multiply then add, K in order), so its rows are
// bit-identical to that GEMM's.
#include <algorithm>

#include "kernels/gemv/gemv_kernels.h"
#include "numerics/e4m3.h"

namespace fp8rl::gemv_detail {

int fp8_chunk_position(int natural) {
  // order[16q + b] = b < 8 ? 8q + b : 32 + 8q + b - 8 (the lane order of the vpermi2b decode).
  const int half = natural / 32, q = (natural % 32) / 8, b = natural % 8;
  return 16 * q + 8 * half + b;
}

void pack_fp8_strips_portable(const uint8_t* codes, int64_t rows, int64_t K, int64_t ld, uint8_t* out) {
  const int64_t chunks = (K + 3) / 4;
  for (int64_t s = 0; s * kGemvStrip < rows; ++s)
    for (int64_t c = 0; c < chunks; ++c)
      for (int i = 0; i < 64; ++i) {
        const int64_t n = s * kGemvStrip + (i % 32) / 2, k = 4 * c + 2 * (i / 32) + i % 2;
        out[(s * chunks + c) * 64 + fp8_chunk_position(i)] = n < rows && k < K ? codes[n * ld + k] : 0;
      }
}

void pack_bf16_strips_portable(const bf16_t* w, int64_t rows, int64_t K, int64_t ld, uint8_t* out_bytes) {
  auto* out = reinterpret_cast<bf16_t*>(out_bytes);
  const int64_t pairs = (K + 1) / 2;
  for (int64_t s = 0; s * kGemvStrip < rows; ++s)
    for (int64_t p = 0; p < pairs; ++p)
      for (int i = 0; i < 32; ++i) {
        const int64_t n = s * kGemvStrip + i / 2, k = 2 * p + i % 2;
        out[(s * pairs + p) * 32 + i] = n < rows && k < K ? w[n * ld + k] : bf16_t{0};
      }
}

void gemv_strips_portable(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                          int64_t s1) {
  const int64_t M = x.M, K = W.cols, pairs = (K + 1) / 2, slices = (K + kQuantBlock - 1) / kQuantBlock;
  const int64_t strip_bytes = W.strip_bytes();
  const bool fp8 = W.type == DType::kE4M3;
  int position[64];
  for (int i = 0; i < 64; ++i) position[i] = fp8_chunk_position(i);
  for (int64_t s = s0; s < s1; ++s) {
    const uint8_t* strip = W.data.data() + s * strip_bytes;
    float out[kGemvMaxRows][kGemvStrip] = {};
    const int64_t slice_pairs = fp8 ? kQuantBlock / 2 : pairs;  // BF16: one "slice" = all of K
    for (int64_t p0 = 0; p0 < pairs; p0 += slice_pairs) {
      float acc[kGemvMaxRows][kGemvStrip] = {};
      for (int64_t p = p0; p < std::min(pairs, p0 + slice_pairs); ++p)
        for (int kk = 0; kk < 2 && 2 * p + kk < K; ++kk)  // as the GEMM: no padding term
          for (int64_t m = 0; m < M; ++m) {
            const uint32_t word = x.pairs[static_cast<size_t>(p * M + m)];
            const float xv = bf16_to_f32(static_cast<bf16_t>(kk ? word >> 16 : word & 0xFFFF));
            for (int r = 0; r < kGemvStrip; ++r) {
              const float wv = fp8 ? e4m3_to_f32(strip[(p / 2) * 64 + position[32 * (p % 2) + 2 * r + kk]])
                                   : bf16_to_f32(reinterpret_cast<const bf16_t*>(strip)[p * 32 + 2 * r + kk]);
              acc[m][r] += xv * wv;
            }
          }
      for (int64_t m = 0; m < M; ++m)
        for (int r = 0; r < kGemvStrip; ++r) {
          if (!fp8) {
            out[m][r] = acc[m][r];
            continue;
          }
          const int64_t n = std::min(s * kGemvStrip + r, W.rows - 1);  // padding rows: any scale
          const float sw = W.scales[static_cast<size_t>((n / kQuantBlock) * slices + p0 / (kQuantBlock / 2))];
          const float sx = x.scales[static_cast<size_t>(m * slices + p0 / (kQuantBlock / 2))];
          out[m][r] = out[m][r] + acc[m][r] * (sx * sw);
        }
    }
    for (int64_t m = 0; m < M; ++m)
      for (int r = 0; r < kGemvStrip && s * kGemvStrip + r < W.rows; ++r)
        dst.y[m * dst.ldy + s * kGemvStrip + r] = dst.round_bf16 ? bf16_to_f32(f32_to_bf16(out[m][r])) : out[m][r];
  }
}

}  // namespace fp8rl::gemv_detail
