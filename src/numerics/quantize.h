// Blockwise FP8 quantization and dequantization (docs/recipe.md section 3).
//
// Sources and destinations are 2-D FP32 or BF16 views with unit column stride and any row
// stride. Every path (AVX-512, portable) is bit-identical to the naive per-tile loop in
// quantize_reference.h; tests/numerics/quantize_test.cc proves it on awkward shapes.
#pragma once

#include "core/cpu_features.h"
#include "core/tensor.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl {

// Quantizes `src` ([rows, cols], F32 or BF16) into a new tensor; with `with_columnwise`, also
// makes the transposed column-wise copy (see quantized_tensor.h).
QuantizedTensor quantize(const TensorView& src, ScalingMode mode, ScaleFormat format,
                         bool with_columnwise = false, Isa isa = Isa::kAuto);

// Quantizes `src` into existing storage without allocating (the refit path). `dst` fixes the
// mode, the scale format and whether a column-wise copy is made; its shape must match `src`.
void quantize_into(const TensorView& src, QuantizedTensor& dst, Isa isa = Isa::kAuto);

// x = e4m3_to_f32(q) * s for every element, into `dst` ([rows, cols], F32, or BF16 rounded to
// nearest even).
void dequantize(const QuantizedMatrix& q, const TensorView& dst, Isa isa = Isa::kAuto);

}  // namespace fp8rl
