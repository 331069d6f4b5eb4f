// A projection's bias (Qwen2's q, k and v), forward next to backward, in FP32. Both engines add
// it the same way, after the GEMM and before the output's one BF16 rounding, as a GEMM epilogue
// with a bias would: y = round(x W^T + b).
//
// Shapes: y, dy [M, N] row-major; b, db [N].
#pragma once

#include <cstdint>

namespace fp8rl {

// y[m, n] += b[n]; with round_output_bf16 the sums are then rounded to BF16 values.
void bias_forward(float* y, const float* b, int64_t M, int64_t N, bool round_output_bf16);
// db[n] += (sum over m of dy[m, n]), each column's sum taken from +0 in row order, then added
// once (the gradient contract of docs/distributed.md: one term per call).
void bias_backward(float* db, const float* dy, int64_t M, int64_t N);

}  // namespace fp8rl
