// Portable back-end of the blocked GEMM: plain C++ at the baseline target, for CPUs without
// AVX-512 BF16. Every operand type is widened exactly to FP32 while packing (BF16 and E4M3 values
// are FP32 values), and a 4 x 16 register tile of FP32 multiply-then-add (no contraction) does
// the arithmetic; the compiler vectorises the inner loops with the baseline SIMD.
//
// Packed layouts (k_group 1): A panel [kc][4] f32, B panel [kc][16] f32; FP8 scales
// [ceil(kc/128)][tile] f32.
#include <algorithm>

#include "kernels/gemm/gemm_blocked.h"
#include "numerics/bf16.h"
#include "numerics/e4m3.h"

namespace fp8rl::gemm_detail {
namespace {

constexpr int kMr = 4;
constexpr int kNr = 16;

// Table of the 256 E4M3 values (exact), built from the scalar codec.
struct E4m3Table {
  float value[256];
  E4m3Table() {
    for (int c = 0; c < 256; ++c) value[c] = e4m3_to_f32(static_cast<uint8_t>(c));
  }
};
const E4m3Table& e4m3_table() {
  static const E4m3Table table;
  return table;
}

float element(const GemmOperand& op, int64_t r, int64_t k) {
  const int64_t at = op.k_contiguous ? r * op.ld + k : k * op.ld + r;
  switch (op.type) {
    case DType::kF32: return static_cast<const float*>(op.data)[at];
    case DType::kBF16: return bf16_to_f32(static_cast<const bf16_t*>(op.data)[at]);
    case DType::kE4M3: return e4m3_table().value[static_cast<const uint8_t*>(op.data)[at]];
    case DType::kI32:
    case DType::kU8: break;  // never GEMM operands (gemm.cc builds F32, BF16 and E4M3 ones)
  }
  return 0.0f;
}

void pack_panel(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, void* panel_out,
                float* scales) {
  float* panel = static_cast<float*>(panel_out);  // [kc][tile]
  for (int64_t k = 0; k < kc; ++k)
    for (int r = 0; r < tile; ++r) panel[k * tile + r] = r < rows ? element(op, r0 + r, k0 + k) : 0.0f;
  if (scales != nullptr) pack_fp8_scales(op, r0, rows, tile, k0, kc, scales);
}

// acc[m][n] (+)= sum over k in [k_begin, k_end) of a[k][m] * b[k][n], in k order.
void tile_sum(const float* a, const float* b, int64_t k_begin, int64_t k_end, float (&acc)[kMr][kNr]) {
  for (int64_t k = k_begin; k < k_end; ++k)
    for (int m = 0; m < kMr; ++m) {
      const float am = a[k * kMr + m];
      for (int n = 0; n < kNr; ++n) acc[m][n] += am * b[k * kNr + n];
    }
}

void kernel_f32(int64_t kc, const void* a_panel, const void* b_panel, const float*, const float*, float* c,
                int64_t ldc, bool load_c) {
  float acc[kMr][kNr];
  for (int m = 0; m < kMr; ++m)
    for (int n = 0; n < kNr; ++n) acc[m][n] = load_c ? c[m * ldc + n] : 0.0f;
  tile_sum(static_cast<const float*>(a_panel), static_cast<const float*>(b_panel), 0, kc, acc);
  for (int m = 0; m < kMr; ++m)
    for (int n = 0; n < kNr; ++n) c[m * ldc + n] = acc[m][n];
}

// Blockwise FP8 (docs/recipe.md section 4): each 128-element slice of K is summed from zero, then
// running = running + slice * (s_a * s_b), the running value living in C between calls.
void kernel_fp8(int64_t kc, const void* a_panel, const void* b_panel, const float* sa, const float* sb, float* c,
                int64_t ldc, bool load_c) {
  for (int64_t s = 0; s * kQuantBlock < kc; ++s) {
    float slice[kMr][kNr] = {};
    tile_sum(static_cast<const float*>(a_panel), static_cast<const float*>(b_panel), s * kQuantBlock,
             std::min(kc, (s + 1) * kQuantBlock), slice);
    const bool continued = load_c || s > 0;
    for (int m = 0; m < kMr; ++m)
      for (int n = 0; n < kNr; ++n) {
        const float running = continued ? c[m * ldc + n] : 0.0f;
        c[m * ldc + n] = running + slice[m][n] * (sa[s * kMr + m] * sb[s * kNr + n]);
      }
  }
}

GemmBackend make_backend(const char* name, bool blockwise) {
  GemmBackend be;
  be.name = name;
  be.mr = kMr;
  be.nr = kNr;
  be.k_group = 1;
  be.element_bytes = 4;
  be.blockwise = blockwise;
  be.kc_block = 256;
  be.mc_block = 64;
  be.nc_block = 512;
  be.pack_a = pack_panel;
  be.pack_b = pack_panel;
  be.kernel = blockwise ? kernel_fp8 : kernel_f32;
  return be;
}

}  // namespace

const GemmBackend& gemm_backend_portable(DType type) {
  static const GemmBackend plain = make_backend("portable", /*blockwise=*/false);
  static const GemmBackend blockwise = make_backend("portable-fp8", /*blockwise=*/true);
  return type == DType::kE4M3 ? blockwise : plain;
}

}  // namespace fp8rl::gemm_detail
