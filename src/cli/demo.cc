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
  // A few large outliers per row, as activations have: per-tensor scaling suffers, blocks do not.
  for (int64_t r = 0; r < rows; ++r) x.data<float>()[r * cols + (r * 37) % cols] = 200.0f;

  fmt::print("fp8rl numerics demo: x = N(0,1) with one outlier of 200 per row, shape [{}, {}]\n", rows, cols);
  fmt::print("CPU: {} -> {} kernels\n\n", cpu_features().describe(), isa_name(resolve_isa(Isa::kAuto)));
  fmt::print("{:<16} {:<6} {:>14} {:>14} {:>10}\n", "scaling", "scales", "max |err|", "rel. RMS err", "SNR dB");
  Tensor y(DType::kF32, Shape{rows, cols});
  for (ScalingMode mode : {ScalingMode::kPerTensor, ScalingMode::kRows1x128, ScalingMode::kBlocks128x128}) {
    for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2}) {
      const QuantizedTensor q = quantize(x.view(), mode, format);
      dequantize(q.rowwise, y.view());
      double err2 = 0, sig2 = 0, max_err = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double e = static_cast<double>(y.data<float>()[i]) - x.data<float>()[i];
        err2 += e * e;
        sig2 += static_cast<double>(x.data<float>()[i]) * x.data<float>()[i];
        max_err = std::max(max_err, std::fabs(e));
      }
      fmt::print("{:<16} {:<6} {:>14.6g} {:>14.6g} {:>10.2f}\n", scaling_mode_name(mode),
                 format == ScaleFormat::kPow2 ? "pow2" : "fp32", max_err, std::sqrt(err2 / sig2),
                 10.0 * std::log10(sig2 / err2));
    }
  }

  QuantizedTensor q(ScalingMode::kRows1x128, rows, cols, ScaleFormat::kFp32, false);
  const double seconds = bench::time_median([&] { quantize_into(x.view(), q); }, 5);
  fmt::print("\nquantize_rows_1x128: {:.2f} GB/s of FP32 input ({} MiB, median of 5, one thread)\n",
             static_cast<double>(n) * 4 / seconds / 1e9, n * 4 >> 20);
  fmt::print("Full benchmark against the machine's read bandwidth: build/fp8rl bench numerics\n");
}

}  // namespace fp8rl::cli
