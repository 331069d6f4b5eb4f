#include "cli/demo.h"

#include <fmt/format.h>

#include <cmath>

#include "bench/bench_report.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "numerics/quantize.h"

namespace fp8rl::cli {

void run_demo(int64_t elements) {
  const int64_t cols = 1024;
  const int64_t rows = std::max<int64_t>(1, elements / cols);
  const int64_t n = rows * cols;
  Tensor x(DType::kF32, Shape{rows, cols});
  fill_normal(x.data<float>(), n, 0.0f, 1.0f, /*seed=*/7, /*stream=*/0);
  // Rows (tokens) whose magnitudes differ by up to 2^20, as activations do: one scale for the
  // whole tensor pushes the small rows into E4M3's subnormal range; 1x128 blocks follow each row.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x.data<float>()[r * cols + c] *= std::exp2(static_cast<float>(r % 21 - 10));

  fmt::print("fp8rl numerics demo: x[r, :] = N(0,1) * 2^(r mod 21 - 10), shape [{}, {}]\n", rows, cols);
  fmt::print("CPU: {} -> {} kernels\n\n", cpu_features().describe(), isa_name(resolve_isa(Isa::kAuto)));
  fmt::print("{:<16} {:<6} {:>16} {:>22}\n", "scaling", "scales", "rel. RMS error", "worst row's rel. RMS");
  Tensor y(DType::kF32, Shape{rows, cols});
  for (ScalingMode mode : {ScalingMode::kPerTensor, ScalingMode::kRows1x128, ScalingMode::kBlocks128x128}) {
    for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2}) {
      const QuantizedTensor q = quantize(x.view(), mode, format);
      dequantize(q.rowwise, y.view());
      double err2 = 0, sig2 = 0, worst_row = 0;
      for (int64_t r = 0; r < rows; ++r) {
        double row_err2 = 0, row_sig2 = 0;
        for (int64_t c = 0; c < cols; ++c) {
          const double xv = x.data<float>()[r * cols + c];
          const double e = static_cast<double>(y.data<float>()[r * cols + c]) - xv;
          row_err2 += e * e;
          row_sig2 += xv * xv;
        }
        err2 += row_err2;
        sig2 += row_sig2;
        worst_row = std::max(worst_row, std::sqrt(row_err2 / row_sig2));
      }
      fmt::print("{:<16} {:<6} {:>16.5f} {:>22.5f}\n", scaling_mode_name(mode),
                 format == ScaleFormat::kPow2 ? "pow2" : "fp32", std::sqrt(err2 / sig2), worst_row);
    }
  }

  QuantizedTensor q(ScalingMode::kRows1x128, rows, cols, ScaleFormat::kFp32, /*with_columnwise=*/false);
  const double seconds = bench::time_median([&] { quantize_into(x.view(), q); }, 5);
  fmt::print("\nquantize_rows_1x128: {:.2f} GB/s of FP32 input ({} MiB, median of 5, one thread)\n",
             static_cast<double>(n) * 4 / seconds / 1e9, n * 4 >> 20);
  fmt::print("Full benchmark against the machine's read bandwidth: build/fp8rl bench numerics\n");
}

}  // namespace fp8rl::cli
