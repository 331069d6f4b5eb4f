// The quantizer oracle: a naive loop over tiles that restates docs/recipe.md section 3 directly
// (float comparisons, frexp for power-of-two scales). It shares nothing with quantize.cc but the
// scalar codec, and is never optimised.
#pragma once

#include <cstdint>

#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl::reference {

// src: [rows, cols] row-major.
QuantizedMatrix quantize(const float* src, int64_t rows, int64_t cols, ScalingMode mode, ScaleFormat format);
QuantizedMatrix quantize(const bf16_t* src, int64_t rows, int64_t cols, ScalingMode mode, ScaleFormat format);

// out: [rows, cols] row-major, out = e4m3_to_f32(q) * s.
void dequantize(const QuantizedMatrix& q, float* out);

// The quantization multiplier for a block with the given amax (NaN if the block holds a NaN).
float quant_multiplier(float amax, ScaleFormat format);

}  // namespace fp8rl::reference
