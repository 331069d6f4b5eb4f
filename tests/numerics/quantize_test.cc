// Quantizers and dequantizers: every path against the naive per-tile oracle, bit for bit, on
// awkward shapes with zero, NaN, Inf, huge and tiny blocks; the round-trip error bound; the
// column-wise copy; strided sources.
// ctest-file-label: quick
#include "numerics/quantize.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "core/rng.h"
#include "numerics/e4m3.h"
#include "numerics/quantize_reference.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

struct Case {
  int64_t rows, cols;
};
const Case kShapes[] = {{1, 16}, {65, 96}, {128, 128}, {257, 129}, {993, 512}, {1024, 1}};
const ScalingMode kModes[] = {ScalingMode::kPerTensor, ScalingMode::kRows1x128, ScalingMode::kCols128x1,
                              ScalingMode::kBlocks128x128};
const ScaleFormat kFormats[] = {ScaleFormat::kFp32, ScaleFormat::kPow2};

std::string describe(const Case& s, ScalingMode mode, ScaleFormat f, const char* dtype, Isa isa) {
  return std::string(scaling_mode_name(mode)) + (f == ScaleFormat::kPow2 ? " pow2 " : " fp32 ") + dtype + " " +
         isa_name(isa) + " [" + std::to_string(s.rows) + ", " + std::to_string(s.cols) + "]";
}

// Normal values with per-row magnitudes spread over 2^-8..2^8, plus special blocks: an all-zero
// 128x128 region, a NaN, +-Inf, values near FLT_MAX, and a region of tiny subnormals (whose
// 448/amax overflows).
std::vector<float> make_source(int64_t rows, int64_t cols, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(rows * cols));
  fill_normal(x.data(), rows * cols, 0.0f, 1.0f, seed, 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(r * cols + c)] *= std::exp2(static_cast<float>(r % 17 - 8));
  auto at = [&](int64_t r, int64_t c) -> float* {
    return r < rows && c < cols ? &x[static_cast<size_t>(r * cols + c)] : nullptr;
  };
  // Region 0 (rows 0..127, cols 0..127): zero.
  for (int64_t r = 0; r < std::min<int64_t>(rows, 128); ++r)
    for (int64_t c = 0; c < std::min<int64_t>(cols, 128); ++c) *at(r, c) = 0.0f;
  const float big = std::numeric_limits<float>::max();
  const int64_t r1 = rows > 128 ? 128 : 0;  // second block row if there is one
  if (float* p = at(r1, cols - 1)) *p = std::numeric_limits<float>::quiet_NaN();
  if (float* p = at(rows - 1, cols - 1)) *p = std::numeric_limits<float>::infinity();
  if (float* p = at(rows - 1, 0)) *p = -std::numeric_limits<float>::infinity();
  if (rows >= 260) {
    for (int64_t c = 0; c < cols; ++c) *at(256, c) = (c % 2 ? -0.9f : 0.7f) * big;  // near FLT_MAX
    for (int64_t c = 0; c < cols; ++c) *at(257, c) = (c % 3) * std::numeric_limits<float>::denorm_min();
  }
  return x;
}

void expect_same(const QuantizedMatrix& got, const QuantizedMatrix& want, const std::string& what) {
  ASSERT_EQ(got.mode, want.mode) << what;
  ASSERT_EQ(got.rows, want.rows) << what;
  ASSERT_EQ(got.cols, want.cols) << what;
  ASSERT_EQ(got.scale_inv.size(), want.scale_inv.size()) << what;
  for (size_t i = 0; i < want.scale_inv.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got.scale_inv[i]), std::bit_cast<uint32_t>(want.scale_inv[i]))
        << what << ": scale " << i << " got " << got.scale_inv[i] << " want " << want.scale_inv[i];
  for (size_t i = 0; i < want.codes.size(); ++i)
    ASSERT_EQ(got.codes[i], want.codes[i]) << what << ": code at row " << i / static_cast<size_t>(want.cols)
                                           << " col " << i % static_cast<size_t>(want.cols);
}

std::vector<float> transpose(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[static_cast<size_t>(c * rows + r)] = x[static_cast<size_t>(r * cols + c)];
  return t;
}

TEST(Quantize, EveryModeAndPathMatchesTheOracleBitForBit) {
  for (const Case& s : kShapes) {
    std::vector<float> x = make_source(s.rows, s.cols, 11);
    std::vector<bf16_t> xh(x.size());
    for (size_t i = 0; i < x.size(); ++i) xh[i] = f32_to_bf16(x[i]);
    const TensorView v32 = TensorView::contiguous(x.data(), DType::kF32, Shape{s.rows, s.cols});
    const TensorView v16 = TensorView::contiguous(xh.data(), DType::kBF16, Shape{s.rows, s.cols});
    const std::vector<float> xt = transpose(x, s.rows, s.cols);
    std::vector<bf16_t> xht(xt.size());
    for (size_t i = 0; i < xt.size(); ++i) xht[i] = f32_to_bf16(xt[i]);
    for (ScalingMode mode : kModes) {
      for (ScaleFormat f : kFormats) {
        const QuantizedMatrix want32 = reference::quantize(x.data(), s.rows, s.cols, mode, f);
        const QuantizedMatrix want16 = reference::quantize(xh.data(), s.rows, s.cols, mode, f);
        const ScalingMode tmode = columnwise_mode(mode);
        const QuantizedMatrix want32_t = reference::quantize(xt.data(), s.cols, s.rows, tmode, f);
        const QuantizedMatrix want16_t = reference::quantize(xht.data(), s.cols, s.rows, tmode, f);
        for (Isa isa : testing::available_isas()) {
          const QuantizedTensor q32 = quantize(v32, mode, f, /*with_columnwise=*/true, isa);
          expect_same(q32.rowwise, want32, describe(s, mode, f, "f32", isa));
          expect_same(*q32.columnwise, want32_t, describe(s, mode, f, "f32 columnwise", isa));
          const QuantizedTensor q16 = quantize(v16, mode, f, /*with_columnwise=*/true, isa);
          expect_same(q16.rowwise, want16, describe(s, mode, f, "bf16", isa));
          expect_same(*q16.columnwise, want16_t, describe(s, mode, f, "bf16 columnwise", isa));
        }
      }
    }
  }
}

// Outputs of 8 MiB and more leave with non-temporal stores (quantize.cc); the bits must not change.
// 2049 x 4160: over the threshold, a partial last row block, rows not 64-byte aligned.
TEST(Quantize, LargeOutputsWithStreamingStoresMatchTheOracle) {
  const int64_t rows = 2049, cols = 4160;
  const std::vector<float> x = make_source(rows, cols, 3);
  const TensorView v = TensorView::contiguous(const_cast<float*>(x.data()), DType::kF32, Shape{rows, cols});
  for (ScalingMode mode : {ScalingMode::kPerTensor, ScalingMode::kRows1x128, ScalingMode::kBlocks128x128}) {
    const QuantizedMatrix want = reference::quantize(x.data(), rows, cols, mode, ScaleFormat::kFp32);
    for (Isa isa : testing::available_isas())
      expect_same(quantize(v, mode, ScaleFormat::kFp32, /*with_columnwise=*/false, isa).rowwise, want,
                  describe({rows, cols}, mode, ScaleFormat::kFp32, "f32", isa));
  }
}

TEST(Quantize, Cols128x1IsTheTransposeOfRows1x128OnTheTransposedSource) {
  const int64_t rows = 300, cols = 70;
  std::vector<float> x = make_source(rows, cols, 5);
  const QuantizedMatrix cols_q = reference::quantize(x.data(), rows, cols, ScalingMode::kCols128x1, ScaleFormat::kFp32);
  const std::vector<float> xt = transpose(x, rows, cols);
  const QuantizedMatrix rows_q = reference::quantize(xt.data(), cols, rows, ScalingMode::kRows1x128, ScaleFormat::kFp32);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      ASSERT_EQ(cols_q.codes[static_cast<size_t>(r * cols + c)], rows_q.codes[static_cast<size_t>(c * rows + r)]);
      ASSERT_EQ(std::bit_cast<uint32_t>(cols_q.scale_at(r, c)), std::bit_cast<uint32_t>(rows_q.scale_at(c, r)));
    }
}

// Half an E4M3 ulp at |v| (a value on the E4M3 scale): 2^-10 below 2^-6, else 2^(e-4).
double half_e4m3_ulp(double v) {
  const double a = std::fabs(v);
  if (a < 0x1.0p-6) return 0x1.0p-10;
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(a))) - 4);
}

TEST(Quantize, RoundTripErrorIsWithinHalfAnUlpOfTheBlockScale) {
  for (const Case& s : kShapes) {
    std::vector<float> x = make_source(s.rows, s.cols, 3);
    const TensorView v = TensorView::contiguous(x.data(), DType::kF32, Shape{s.rows, s.cols});
    for (ScalingMode mode : kModes) {
      for (ScaleFormat f : kFormats) {
        const QuantizedTensor q = quantize(v, mode, f);
        std::vector<float> y(x.size());
        dequantize(q.rowwise, TensorView::contiguous(y.data(), DType::kF32, Shape{s.rows, s.cols}));
        // Which blocks hold a non-finite value (those use scale 1 and saturate; not bounded).
        const QuantizedMatrix& m = q.rowwise;
        std::vector<bool> bad(static_cast<size_t>(m.scales().numel()), false);
        auto scale_index = [&](int64_t r, int64_t c) {
          const ScaleShape ss = m.scales();
          switch (mode) {
            case ScalingMode::kPerTensor: return int64_t{0};
            case ScalingMode::kRows1x128: return r * ss.cols + c / 128;
            case ScalingMode::kCols128x1: return (r / 128) * ss.cols + c;
            case ScalingMode::kBlocks128x128: return (r / 128) * ss.cols + c / 128;
          }
          return int64_t{0};
        };
        for (int64_t r = 0; r < s.rows; ++r)
          for (int64_t c = 0; c < s.cols; ++c)
            if (!std::isfinite(x[static_cast<size_t>(r * s.cols + c)])) bad[static_cast<size_t>(scale_index(r, c))] = true;
        for (int64_t r = 0; r < s.rows; ++r) {
          for (int64_t c = 0; c < s.cols; ++c) {
            if (bad[static_cast<size_t>(scale_index(r, c))]) continue;
            const size_t i = static_cast<size_t>(r * s.cols + c);
            const double scale = m.scale_at(r, c);
            const double scaled = static_cast<double>(x[i]) / scale;  // x on the E4M3 scale
            // Half an E4M3 ulp on the block's scale, plus FP32 rounding of x * qs, 1/qs and q * s.
            const double bound = half_e4m3_ulp(scaled) * scale * (1 + 0x1.0p-20) + std::fabs(x[i]) * 0x1.0p-21 +
                                 std::numeric_limits<float>::denorm_min();
            ASSERT_LE(std::fabs(static_cast<double>(y[i]) - x[i]), bound)
                << scaling_mode_name(mode) << " [" << s.rows << ", " << s.cols << "] at (" << r << ", " << c
                << "): x=" << x[i] << " y=" << y[i] << " scale=" << scale;
          }
        }
      }
    }
  }
}

TEST(Quantize, Pow2ScalesArePowersOfTwoAndExactInverses) {
  std::vector<float> x = make_source(257, 129, 9);
  const QuantizedTensor q = quantize(TensorView::contiguous(x.data(), DType::kF32, Shape{257, 129}),
                                     ScalingMode::kRows1x128, ScaleFormat::kPow2);
  for (float s : q.rowwise.scale_inv) {
    int e = 0;
    ASSERT_EQ(std::frexp(s, &e), 0.5f) << s;
    EXPECT_EQ(s * std::ldexp(1.0f, -(e - 1)), 1.0f);
  }
}

TEST(Quantize, ScaleRuleEdgeCases) {
  EXPECT_EQ(reference::quant_multiplier(0.0f, ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(reference::quant_multiplier(std::numeric_limits<float>::infinity(), ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(reference::quant_multiplier(std::numeric_limits<float>::quiet_NaN(), ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(reference::quant_multiplier(448.0f, ScaleFormat::kFp32), 1.0f);
  EXPECT_EQ(reference::quant_multiplier(3.0f, ScaleFormat::kFp32), 448.0f / 3.0f);
  EXPECT_EQ(reference::quant_multiplier(3.0f, ScaleFormat::kPow2), 128.0f);  // 149.33 rounded down
  EXPECT_EQ(reference::quant_multiplier(std::numeric_limits<float>::denorm_min(), ScaleFormat::kFp32),
            std::numeric_limits<float>::max());
  EXPECT_EQ(reference::quant_multiplier(std::numeric_limits<float>::denorm_min(), ScaleFormat::kPow2), 0x1.0p127f);
  for (uint32_t bits : {0u, 1u, 0x3F800000u, 0x7F7FFFFFu, 0x7F800000u, 0x7FC00000u, 0x00800000u})
    for (ScaleFormat f : kFormats)
      EXPECT_EQ(quant_multiplier_from_amax_bits(bits, f), reference::quant_multiplier(std::bit_cast<float>(bits), f))
          << std::hex << bits;
}

TEST(Quantize, StridedSourceEqualsContiguous) {
  const int64_t rows = 130, cols = 200, ld = 256;
  std::vector<float> x = make_source(rows, cols, 4);
  std::vector<float> padded(static_cast<size_t>(rows * ld), 12345.0f);  // padding must not leak in
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) padded[static_cast<size_t>(r * ld + c)] = x[static_cast<size_t>(r * cols + c)];
  for (Isa isa : testing::available_isas()) {
    for (ScalingMode mode : kModes) {
      const QuantizedTensor a =
          quantize(TensorView::matrix(padded.data(), DType::kF32, rows, cols, ld), mode, ScaleFormat::kFp32, true, isa);
      const QuantizedMatrix want = reference::quantize(x.data(), rows, cols, mode, ScaleFormat::kFp32);
      expect_same(a.rowwise, want, std::string("strided ") + scaling_mode_name(mode));
    }
  }
}

TEST(Dequantize, EveryPathMatchesTheOracle) {
  for (const Case& s : kShapes) {
    std::vector<float> x = make_source(s.rows, s.cols, 21);
    for (ScalingMode mode : kModes) {
      const QuantizedMatrix q = reference::quantize(x.data(), s.rows, s.cols, mode, ScaleFormat::kFp32);
      std::vector<float> want(x.size());
      reference::dequantize(q, want.data());
      for (Isa isa : testing::available_isas()) {
        std::vector<float> got(x.size());
        std::vector<bf16_t> got16(x.size());
        dequantize(q, TensorView::contiguous(got.data(), DType::kF32, Shape{s.rows, s.cols}), isa);
        dequantize(q, TensorView::contiguous(got16.data(), DType::kBF16, Shape{s.rows, s.cols}), isa);
        for (size_t i = 0; i < x.size(); ++i) {
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << scaling_mode_name(mode) << " " << isa_name(isa) << " element " << i;
          ASSERT_EQ(got16[i], f32_to_bf16(want[i])) << scaling_mode_name(mode) << " " << isa_name(isa) << " element " << i;
        }
      }
    }
  }
}

TEST(Quantize, IntoExistingStorageIsRepeatable) {
  std::vector<float> x = make_source(200, 300, 8);
  const TensorView v = TensorView::contiguous(x.data(), DType::kF32, Shape{200, 300});
  QuantizedTensor q(ScalingMode::kBlocks128x128, 200, 300, ScaleFormat::kFp32, true);
  const uint8_t* codes_before = q.rowwise.codes.data();
  quantize_into(v, q);
  const QuantizedTensor first = q.clone();
  for (float& e : x) e *= 0.5f;
  quantize_into(v, q);
  EXPECT_EQ(q.rowwise.codes.data(), codes_before) << "quantize_into must not reallocate";
  for (float& e : x) e *= 2.0f;
  quantize_into(v, q);
  expect_same(q.rowwise, first.rowwise, "requantized");
  expect_same(*q.columnwise, *first.columnwise, "requantized columnwise");
}

// A reshaped tensor (smaller, then larger than its first shape) quantizes exactly like a fresh
// one, and shrinking keeps the storage.
TEST(Quantize, ReshapedStorageGivesTheFreshResult) {
  QuantizedTensor q(ScalingMode::kRows1x128, 150, 300, ScaleFormat::kFp32, true);
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{150, 300}, {37, 129}, {90, 300}, {300, 300}}) {
    std::vector<float> x = make_source(rows, cols, 11);
    const TensorView v = TensorView::contiguous(x.data(), DType::kF32, Shape{rows, cols});
    const uint8_t* before = q.rowwise.codes.data();
    q.reshape(rows, cols);
    if (rows * cols <= 150 * 300) {
      EXPECT_EQ(q.rowwise.codes.data(), before) << "reshape within capacity reallocated";
    }
    quantize_into(v, q);
    const QuantizedTensor fresh = quantize(v, ScalingMode::kRows1x128, ScaleFormat::kFp32, true);
    ASSERT_EQ(q.rowwise.codes.size(), fresh.rowwise.codes.size());
    ASSERT_EQ(q.columnwise->scale_inv.size(), fresh.columnwise->scale_inv.size());
    const std::string what = std::to_string(rows) + "x" + std::to_string(cols);
    expect_same(q.rowwise, fresh.rowwise, what);
    expect_same(*q.columnwise, *fresh.columnwise, what + " columnwise");
  }
}

}  // namespace
}  // namespace fp8rl
