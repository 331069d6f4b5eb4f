#include "kernels/elementwise/bias.h"

#include <vector>

#include "numerics/codec.h"

namespace fp8rl {

void bias_forward(float* y, const float* b, int64_t M, int64_t N, bool round_output_bf16) {
  for (int64_t m = 0; m < M; ++m) {
    float* row = y + m * N;
    for (int64_t n = 0; n < N; ++n) row[n] += b[n];
  }
  if (round_output_bf16) bf16_round_f32(y, M * N);
}

void bias_backward(float* db, const float* dy, int64_t M, int64_t N) {
  std::vector<float> sum(static_cast<size_t>(N), 0.0f);
  for (int64_t m = 0; m < M; ++m) {
    const float* row = dy + m * N;
    for (int64_t n = 0; n < N; ++n) sum[static_cast<size_t>(n)] += row[n];
  }
  for (int64_t n = 0; n < N; ++n) db[n] += sum[static_cast<size_t>(n)];
}

}  // namespace fp8rl
