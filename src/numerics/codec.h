// Whole-array E4M3 and BF16 conversions, dispatched to AVX-512 or portable code.
//
// Every function gives bit-identical results on every path (the scalar codec in e4m3.h and
// bf16.h is the definition). `isa` defaults to the best path the CPU supports; tests pass an
// explicit one to compare paths. Arrays may have any length and alignment; in and out must not
// overlap.
#pragma once

#include <cstdint>

#include "core/cpu_features.h"
#include "numerics/bf16.h"

namespace fp8rl {

void e4m3_encode_f32(const float* in, uint8_t* out, int64_t n, Isa isa = Isa::kAuto);
void e4m3_decode_f32(const uint8_t* in, float* out, int64_t n, Isa isa = Isa::kAuto);
void e4m3_decode_bf16(const uint8_t* in, bf16_t* out, int64_t n, Isa isa = Isa::kAuto);
void bf16_encode_f32(const float* in, bf16_t* out, int64_t n, Isa isa = Isa::kAuto);
void bf16_decode_f32(const bf16_t* in, float* out, int64_t n, Isa isa = Isa::kAuto);
// x[i] = bf16_to_f32(f32_to_bf16(x[i])): rounds FP32 values to BF16 values, in place.
void bf16_round_f32(float* x, int64_t n, Isa isa = Isa::kAuto);

namespace detail {
// bf16_round_f32's implementation at `isa` (resolved as the dispatchers do), for callers that
// round many small pieces on their own threads (the GEMM driver's tiles), without the chunking
// through the kernel pool.
using Bf16RoundFn = void (*)(float* x, int64_t n);
Bf16RoundFn bf16_round_f32_kernel(Isa isa);
// bf16_encode_f32's implementation at `isa`, likewise (the attention backward's rows).
using Bf16EncodeFn = void (*)(const float* in, bf16_t* out, int64_t n);
Bf16EncodeFn bf16_encode_f32_kernel(Isa isa);

// The AVX-512 implementations (codec_avx512.cc); call only after resolve_isa() said kAvx512.
void e4m3_encode_f32_avx512(const float* in, uint8_t* out, int64_t n);
void e4m3_decode_f32_avx512(const uint8_t* in, float* out, int64_t n);
void e4m3_decode_bf16_avx512(const uint8_t* in, bf16_t* out, int64_t n);
void bf16_encode_f32_avx512(const float* in, bf16_t* out, int64_t n);
void bf16_decode_f32_avx512(const bf16_t* in, float* out, int64_t n);
void bf16_round_f32_avx512(float* x, int64_t n);

// The AVX2 implementations (codec_avx2.cc); call only after resolve_isa() said kAvx2 or above.
void e4m3_encode_f32_avx2(const float* in, uint8_t* out, int64_t n);
void e4m3_decode_f32_avx2(const uint8_t* in, float* out, int64_t n);
void e4m3_decode_bf16_avx2(const uint8_t* in, bf16_t* out, int64_t n);
void bf16_encode_f32_avx2(const float* in, bf16_t* out, int64_t n);
void bf16_decode_f32_avx2(const bf16_t* in, float* out, int64_t n);
void bf16_round_f32_avx2(float* x, int64_t n);

// The 128-entry byte tables of the vpermi2b decode: high and low byte of the BF16 pattern of
// each E4M3 magnitude code 0..127, generated from the scalar codec.
struct E4m3DecodeTables {
  alignas(64) uint8_t bf16_high[128];
  alignas(64) uint8_t bf16_low[128];
};
const E4m3DecodeTables& e4m3_decode_tables();
}  // namespace detail

}  // namespace fp8rl
