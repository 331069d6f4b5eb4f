// Decode GEMV against its scalar twins, bit-identity with the GEMM rows (batch invariance), with
// M = 1 rows, across thread counts, and the packing paths against each other.
// ctest-file-label: quick
#include "kernels/gemv/gemv.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "kernels/gemm/gemm.h"
#include "kernels/reference/gemm_reference.h"
#include "kernels/reference/gemv_reference.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "numerics/quantize.h"
#include "tests/kernels/product_check.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

struct WeightShape {
  int64_t N, K;
};
const WeightShape kShapes[] = {{1, 1}, {127, 129}, {129, 127}, {1000, 300}, {33, 1000}, {16, 130}};
const int64_t kRowCounts[] = {1, 3, 8, 16};

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0.0f, 1.0f, seed, 0);
  return x;
}
std::vector<bf16_t> to_bf16(const std::vector<float>& x) {
  std::vector<bf16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
  return h;
}
QuantizedTensor quantized(const std::vector<float>& x, int64_t rows, int64_t cols, ScalingMode mode) {
  return quantize(TensorView::contiguous(const_cast<float*>(x.data()), DType::kF32, Shape{rows, cols}), mode,
                  ScaleFormat::kFp32);
}
// sum_k |x_mk w_nk| with x and w given as values (already dequantized).
std::vector<double> magnitudes(int64_t M, int64_t N, int64_t K, const std::vector<float>& x,
                               const std::vector<float>& w) {
  std::vector<double> mag(static_cast<size_t>(M * N));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += std::fabs(static_cast<double>(x[m * K + k]) * w[n * K + k]);
      mag[static_cast<size_t>(m * N + n)] = s;
    }
  return mag;
}
std::vector<float> values_of(const std::vector<bf16_t>& h) {
  std::vector<float> x(h.size());
  for (size_t i = 0; i < h.size(); ++i) x[i] = bf16_to_f32(h[i]);
  return x;
}
std::vector<float> values_of(const QuantizedMatrix& q) {
  std::vector<float> x(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      x[static_cast<size_t>(r * q.cols + c)] =
          e4m3_to_f32(q.codes[static_cast<size_t>(r * q.cols + c)]) * q.scale_at(r, c);
  return x;
}

TEST(Gemv, EveryWeightAndActivationTypeMatchesItsTwin) {
  for (Isa isa : testing::available_isas())
    for (const WeightShape& s : kShapes)
      for (int64_t M : kRowCounts) {
        const std::string what = std::string(isa_name(isa)) + " M=" + std::to_string(M) + " N=" + std::to_string(s.N) +
                                 " K=" + std::to_string(s.K);
        const GemvOptions options{isa, 2, false};
        const std::vector<float> wf = random_values(s.N * s.K, 1), xf = random_values(M * s.K, 2);
        const std::vector<bf16_t> wh = to_bf16(wf), xh = to_bf16(xf);
        const QuantizedTensor wq = quantized(wf, s.N, s.K, ScalingMode::kBlocks128x128);
        const QuantizedTensor xq = quantized(xf, M, s.K, ScalingMode::kRows1x128);
        const int64_t slices = (s.K + 127) / 128;
        std::vector<float> fast(M * s.N), twin(M * s.N);

        PackedGemvWeights wb, w8;
        pack_gemv_weights_bf16(wh.data(), s.N, s.K, s.K, wb, options);
        pack_gemv_weights_fp8(wq.rowwise, w8, options);

        gemv_bf16(wb, M, xh.data(), s.K, fast.data(), s.N, options);
        reference::gemm_nt_bf16(M, s.N, s.K, xh.data(), s.K, wh.data(), s.K, twin.data(), s.N, false);
        testing::expect_close_to_twin("bf16 W " + what, M, s.N, fast.data(), twin.data(), s.N,
                                      magnitudes(M, s.N, s.K, values_of(xh), values_of(wh)), s.K);

        gemv_bf16(w8, M, xh.data(), s.K, fast.data(), s.N, options);
        reference::gemm_nt_bf16_fp8w(M, xh.data(), s.K, wq.rowwise, twin.data(), s.N);
        testing::expect_close_to_twin("fp8 W bf16 x " + what, M, s.N, fast.data(), twin.data(), s.N,
                                      magnitudes(M, s.N, s.K, values_of(xh), values_of(wq.rowwise)), s.K + 2 * slices);

        gemv_fp8(w8, xq.rowwise, fast.data(), s.N, options);
        reference::gemm_nt_fp8(xq.rowwise, wq.rowwise, twin.data(), s.N, false);
        testing::expect_close_to_twin("fp8 W fp8 x " + what, M, s.N, fast.data(), twin.data(), s.N,
                                      magnitudes(M, s.N, s.K, values_of(xq.rowwise), values_of(wq.rowwise)),
                                      s.K + 2 * slices);
      }
}

// With batch_invariant on, every decode row is the GEMM's row bit for bit, and does not depend on
// M or on the thread count.
TEST(Gemv, RowsAreBitIdenticalToGemmRowsAndIndependentOfM) {
  for (Isa isa : testing::available_isas())
    for (const WeightShape& s : kShapes) {
      const int64_t M = 11;
      const std::vector<float> wf = random_values(s.N * s.K, 3), xf = random_values(M * s.K, 4);
      const std::vector<bf16_t> wh = to_bf16(wf), xh = to_bf16(xf);
      const QuantizedTensor wq = quantized(wf, s.N, s.K, ScalingMode::kBlocks128x128);
      const QuantizedTensor xq = quantized(xf, M, s.K, ScalingMode::kRows1x128);
      const GemvOptions gemv_options{isa, 1, true};
      const GemmOptions gemm_options{isa, 2, true};
      PackedGemvWeights wb, w8;
      pack_gemv_weights_bf16(wh.data(), s.N, s.K, s.K, wb, gemv_options);
      pack_gemv_weights_fp8(wq.rowwise, w8, gemv_options);
      const std::string what = std::string(isa_name(isa)) + " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K);
      std::vector<float> decode(M * s.N), decode2(M * s.N), gemm(M * s.N), one(s.N);

      gemv_bf16(wb, M, xh.data(), s.K, decode.data(), s.N, gemv_options);
      gemv_bf16(wb, M, xh.data(), s.K, decode2.data(), s.N, GemvOptions{isa, 2, true});
      gemm_nt_bf16(M, s.N, s.K, xh.data(), s.K, wh.data(), s.K, gemm.data(), s.N, false, gemm_options);
      EXPECT_EQ(0, std::memcmp(decode.data(), gemm.data(), gemm.size() * 4)) << "bf16 " << what;
      EXPECT_EQ(0, std::memcmp(decode.data(), decode2.data(), gemm.size() * 4)) << "bf16 threads " << what;
      gemv_bf16(wb, 1, xh.data() + 7 * s.K, s.K, one.data(), s.N, gemv_options);
      EXPECT_EQ(0, std::memcmp(one.data(), gemm.data() + 7 * s.N, one.size() * 4)) << "bf16 M=1 " << what;

      gemv_fp8(w8, xq.rowwise, decode.data(), s.N, gemv_options);
      gemv_fp8(w8, xq.rowwise, decode2.data(), s.N, GemvOptions{isa, 2, true});
      gemm_nt_fp8(xq.rowwise, wq.rowwise, gemm.data(), s.N, false, gemm_options);
      EXPECT_EQ(0, std::memcmp(decode.data(), gemm.data(), gemm.size() * 4)) << "fp8 " << what;
      EXPECT_EQ(0, std::memcmp(decode.data(), decode2.data(), gemm.size() * 4)) << "fp8 threads " << what;
    }
}

// Without batch invariance, a single row on an AMX machine runs the AVX-512 kernels (their bits);
// two rows or more, and every call with invariance on, stay on the tiles.
TEST(Gemv, NonInvariantSingleRowsRunTheAvx512KernelsOnAmxMachines) {
  const std::vector<Isa> isas = testing::available_isas();
  if (std::find(isas.begin(), isas.end(), Isa::kAmx) == isas.end()) GTEST_SKIP() << "no AMX on this CPU";
  const int64_t N = 300, K = 1000;
  const std::vector<float> wf = random_values(N * K, 5), xf = random_values(2 * K, 6);
  const std::vector<bf16_t> wh = to_bf16(wf), xh = to_bf16(xf);
  const QuantizedTensor wq = quantized(wf, N, K, ScalingMode::kBlocks128x128);
  PackedGemvWeights wb, w8;
  pack_gemv_weights_bf16(wh.data(), N, K, K, wb);
  pack_gemv_weights_fp8(wq.rowwise, w8);
  for (const PackedGemvWeights* W : {&wb, &w8})
    for (int64_t M : {1, 2}) {
      auto run = [&](Isa isa, bool invariant) {
        std::vector<float> y(static_cast<size_t>(M * N));
        gemv_bf16(*W, M, xh.data(), K, y.data(), N, GemvOptions{isa, 1, invariant});
        return y;
      };
      const std::vector<float> fast = run(Isa::kAmx, false);
      const std::string what = std::string(W == &wb ? "bf16" : "fp8") + " W, M=" + std::to_string(M);
      EXPECT_EQ(fast, run(M == 1 ? Isa::kAvx512 : Isa::kAmx, true)) << what;
      EXPECT_EQ(run(Isa::kAmx, true), run(Isa::kAuto, true)) << what;
      if (M == 1) {
        EXPECT_NE(fast, run(Isa::kAmx, true)) << what << ": the tile path's bits differ";
      }
    }
}

// round_output_bf16 rounds in the task that computed the outputs: the bits of rounding afterwards,
// and nothing written outside y's N columns (ldy > N here).
TEST(Gemv, RoundedOutputEqualsRoundingAfterwards) {
  for (Isa isa : testing::available_isas())
    for (const WeightShape& s : kShapes) {
      const int64_t M = 5, ldy = s.N + 3;
      const std::vector<float> wf = random_values(s.N * s.K, 6), xf = random_values(M * s.K, 7);
      const std::vector<bf16_t> wh = to_bf16(wf), xh = to_bf16(xf);
      const QuantizedTensor wq = quantized(wf, s.N, s.K, ScalingMode::kBlocks128x128);
      const QuantizedTensor xq = quantized(xf, M, s.K, ScalingMode::kRows1x128);
      PackedGemvWeights wb, w8;
      pack_gemv_weights_bf16(wh.data(), s.N, s.K, s.K, wb, GemvOptions{isa, 2, true});
      pack_gemv_weights_fp8(wq.rowwise, w8, GemvOptions{isa, 2, true});
      for (int fp8 = 0; fp8 < 2; ++fp8) {
        std::vector<float> plain(static_cast<size_t>(M * ldy), 3.0f), rounded(plain.size(), 3.0f);
        GemvOptions options{isa, 2, true};
        for (std::vector<float>* y : {&plain, &rounded}) {
          options.round_output_bf16 = y == &rounded;
          if (fp8)
            gemv_fp8(w8, xq.rowwise, y->data(), ldy, options);
          else
            gemv_bf16(wb, M, xh.data(), s.K, y->data(), ldy, options);
        }
        for (int64_t m = 0; m < M; ++m) bf16_round_f32(plain.data() + m * ldy, s.N);
        EXPECT_EQ(0, std::memcmp(plain.data(), rounded.data(), plain.size() * 4))
            << isa_name(isa) << (fp8 ? " fp8" : " bf16") << " N=" << s.N << " K=" << s.K;
      }
    }
}

TEST(Gemv, SeveralMatricesInOneCallGiveEachSingleCallsBits) {
  const int64_t K = 300, M = 7, Ns[3] = {129, 16, 1000};  // strips shared out across the three
  const std::vector<float> xf = random_values(M * K, 8);
  const std::vector<bf16_t> xh = to_bf16(xf);
  const QuantizedTensor xq = quantized(xf, M, K, ScalingMode::kRows1x128);
  for (Isa isa : testing::available_isas())
    for (int fp8 = 0; fp8 < 2; ++fp8) {
      const GemvOptions options{isa, 2, true, /*round_output_bf16=*/fp8 == 1};
      PackedGemvWeights w[3];
      std::vector<float> single[3], fused[3];
      GemvTarget targets[3];
      for (int i = 0; i < 3; ++i) {
        const std::vector<float> wf = random_values(Ns[i] * K, 20 + static_cast<uint64_t>(i));
        if (fp8)
          pack_gemv_weights_fp8(quantized(wf, Ns[i], K, ScalingMode::kBlocks128x128).rowwise, w[i], options);
        else
          pack_gemv_weights_bf16(to_bf16(wf).data(), Ns[i], K, K, w[i], options);
        single[i].assign(static_cast<size_t>(M * Ns[i]), 0.0f);
        fused[i].assign(single[i].size(), 5.0f);
        if (fp8)
          gemv_fp8(w[i], xq.rowwise, single[i].data(), Ns[i], options);
        else
          gemv_bf16(w[i], M, xh.data(), K, single[i].data(), Ns[i], options);
        targets[i] = {&w[i], fused[i].data(), Ns[i]};
      }
      if (fp8)
        gemv_fp8(targets, 3, xq.rowwise, options);
      else
        gemv_bf16(targets, 3, M, xh.data(), K, options);
      for (int i = 0; i < 3; ++i)
        EXPECT_EQ(0, std::memcmp(single[i].data(), fused[i].data(), single[i].size() * 4))
            << isa_name(isa) << (fp8 ? " fp8" : " bf16") << " matrix " << i << " N=" << Ns[i];
    }
}

// The AVX2 level's rows are the portable level's bit for bit (and so the portable and AVX2 GEMMs'
// rows): BF16 W with BF16 x, FP8 W with BF16 x, FP8 W with FP8 x; every M it has a kernel shape
// for, awkward N and K (K tails of 1..3 elements, partial 128-slices, half-empty last strips),
// both scale formats, rounded and plain outputs, nothing written past N (ldy > N).
TEST(Gemv, Avx2GivesThePortableBits) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 on this CPU";
  int variant = 0;
  for (int64_t M : {1, 2, 3, 5, 8, 13, 16})
    for (int64_t N : {1, 16, 17, 130, 300})
      for (int64_t K : {1, 2, 3, 127, 128, 129, 300, 1000}) {
        ++variant;
        const ScaleFormat format = variant % 2 ? ScaleFormat::kFp32 : ScaleFormat::kPow2;
        const bool round = (variant / 2) % 2 == 1;
        const std::vector<float> wf = random_values(N * K, 100 + static_cast<uint64_t>(variant)),
                                 xf = random_values(M * K, 200 + static_cast<uint64_t>(variant));
        const std::vector<bf16_t> wh = to_bf16(wf), xh = to_bf16(xf);
        const auto as_view = [](const std::vector<float>& v, int64_t rows, int64_t cols) {
          return TensorView::contiguous(const_cast<float*>(v.data()), DType::kF32, Shape{rows, cols});
        };
        const QuantizedTensor wq = quantize(as_view(wf, N, K), ScalingMode::kBlocks128x128, format);
        const QuantizedTensor xq = quantize(as_view(xf, M, K), ScalingMode::kRows1x128, format);
        PackedGemvWeights wb, w8;
        pack_gemv_weights_bf16(wh.data(), N, K, K, wb);
        pack_gemv_weights_fp8(wq.rowwise, w8);
        const int64_t ldy = N + 3;
        for (int kind = 0; kind < 3; ++kind) {
          auto run = [&](Isa isa) {
            std::vector<float> y(static_cast<size_t>(M * ldy), -7.0f);
            const GemvOptions options{isa, 2, true, round};
            if (kind == 2)
              gemv_fp8(w8, xq.rowwise, y.data(), ldy, options);
            else
              gemv_bf16(kind == 0 ? wb : w8, M, xh.data(), K, y.data(), ldy, options);
            return y;
          };
          const std::vector<float> portable = run(Isa::kPortable), avx2 = run(Isa::kAvx2);
          EXPECT_EQ(0, std::memcmp(portable.data(), avx2.data(), portable.size() * 4))
              << (kind == 0   ? "bf16 W"
                  : kind == 1 ? "fp8 W bf16 x"
                              : "fp8 W fp8 x")
              << " M=" << M << " N=" << N << " K=" << K << (format == ScaleFormat::kPow2 ? " pow2" : " fp32")
              << (round ? " rounded" : "");
        }
      }
  // Several matrices in one call (strips of all three shared out), each output the portable bits.
  const int64_t M = 5, K = 300, Ns[3] = {17, 300, 1};
  const std::vector<float> xf = random_values(M * K, 9);
  const std::vector<bf16_t> xh = to_bf16(xf);
  const QuantizedTensor xq = quantized(xf, M, K, ScalingMode::kRows1x128);
  for (int kind = 0; kind < 3; ++kind) {
    PackedGemvWeights w[3];
    std::vector<float> portable[3], fused[3];
    GemvTarget targets[3];
    const GemvOptions options{Isa::kAvx2, 2, true, kind == 1};
    for (int i = 0; i < 3; ++i) {
      const std::vector<float> wf = random_values(Ns[i] * K, 30 + static_cast<uint64_t>(i));
      if (kind == 0)
        pack_gemv_weights_bf16(to_bf16(wf).data(), Ns[i], K, K, w[i]);
      else
        pack_gemv_weights_fp8(quantized(wf, Ns[i], K, ScalingMode::kBlocks128x128).rowwise, w[i]);
      portable[i].assign(static_cast<size_t>(M * Ns[i]), 0.0f);
      fused[i].assign(portable[i].size(), 5.0f);
      GemvOptions portable_options = options;
      portable_options.isa = Isa::kPortable;
      if (kind == 2)
        gemv_fp8(w[i], xq.rowwise, portable[i].data(), Ns[i], portable_options);
      else
        gemv_bf16(w[i], M, xh.data(), K, portable[i].data(), Ns[i], portable_options);
      targets[i] = {&w[i], fused[i].data(), Ns[i]};
    }
    if (kind == 2)
      gemv_fp8(targets, 3, xq.rowwise, options);
    else
      gemv_bf16(targets, 3, M, xh.data(), K, options);
    for (int i = 0; i < 3; ++i)
      EXPECT_EQ(0, std::memcmp(portable[i].data(), fused[i].data(), portable[i].size() * 4))
          << "kind " << kind << " matrix " << i << " N=" << Ns[i];
  }
}

// The AVX2 kernel decodes the FP8 codes itself (a shift-and-multiply of the bytes in its own lane
// order, NaN codes on an exact slow path): every one of the 256 codes, subnormals, +-0 and the two
// NaNs among them, gives the portable bits. Each row holds every finite code; rows 30 and 31 hold
// one NaN each (a single NaN per chain, so which NaN operand wins is never asked).
TEST(Gemv, Avx2GivesThePortableBitsForEveryE4m3Code) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t N = 40, K = 262;
  QuantizedTensor wq(ScalingMode::kBlocks128x128, N, K, ScaleFormat::kFp32, false);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      uint8_t code = static_cast<uint8_t>((k + 7 * n) % 256);
      if ((code & 0x7F) == 0x7F) code = 0;
      wq.rowwise.codes[static_cast<size_t>(n * K + k)] = code;
    }
  wq.rowwise.codes[static_cast<size_t>(30 * K + 5)] = 0x7F;
  wq.rowwise.codes[static_cast<size_t>(31 * K + 200)] = 0xFF;
  for (size_t i = 0; i < wq.rowwise.scale_inv.size(); ++i)
    wq.rowwise.scale_inv[i] = 0.375f + 0.25f * static_cast<float>(i);
  PackedGemvWeights w8;
  pack_gemv_weights_fp8(wq.rowwise, w8);
  for (int64_t M : {1, 4, 9}) {
    const std::vector<float> xf = random_values(M * K, 11);
    const std::vector<bf16_t> xh = to_bf16(xf);
    const QuantizedTensor xq = quantized(xf, M, K, ScalingMode::kRows1x128);
    for (int fp8_x = 0; fp8_x < 2; ++fp8_x) {
      auto run = [&](Isa isa) {
        std::vector<float> y(static_cast<size_t>(M * N));
        if (fp8_x)
          gemv_fp8(w8, xq.rowwise, y.data(), N, GemvOptions{isa, 1, true});
        else
          gemv_bf16(w8, M, xh.data(), K, y.data(), N, GemvOptions{isa, 1, true});
        return y;
      };
      const std::vector<float> portable = run(Isa::kPortable), avx2 = run(Isa::kAvx2);
      EXPECT_TRUE(std::isnan(portable[30]) && std::isnan(portable[31]));
      EXPECT_EQ(0, std::memcmp(portable.data(), avx2.data(), portable.size() * 4)) << "M=" << M << " fp8 x " << fp8_x;
    }
  }
}

TEST(Gemv, PackingPathsAgreeByteForByte) {
  for (const WeightShape& s : {WeightShape{300, 260}, WeightShape{129, 127}, WeightShape{1, 5}})
    for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2}) {
      const std::vector<float> wf = random_values(s.N * s.K, 5);
      const QuantizedTensor wq =
          quantize(TensorView::contiguous(const_cast<float*>(wf.data()), DType::kF32, Shape{s.N, s.K}),
                   ScalingMode::kBlocks128x128, format);
      PackedGemvWeights reference_pack;
      pack_gemv_weights_fp8(wq.rowwise, reference_pack, GemvOptions{Isa::kPortable, 1, false});
      for (Isa isa : testing::available_isas()) {
        PackedGemvWeights from_codes, from_master;
        pack_gemv_weights_fp8(wq.rowwise, from_codes, GemvOptions{isa, 2, false});
        pack_gemv_weights_fp8(wf.data(), s.N, s.K, s.K, format, from_master, GemvOptions{isa, 2, false});
        for (const PackedGemvWeights* p : {&from_codes, &from_master}) {
          ASSERT_EQ(p->data.size(), reference_pack.data.size());
          EXPECT_EQ(0, std::memcmp(p->data.data(), reference_pack.data.data(), p->data.size())) << isa_name(isa);
          EXPECT_EQ(0, std::memcmp(p->scales.data(), wq.rowwise.scale_inv.data(), p->scales.size() * 4))
              << isa_name(isa);
        }
      }
      const std::vector<bf16_t> wh = to_bf16(wf);
      PackedGemvWeights bf_portable, bf_fast;
      pack_gemv_weights_bf16(wh.data(), s.N, s.K, s.K, bf_portable, GemvOptions{Isa::kPortable, 1, false});
      for (Isa isa : testing::available_isas()) {
        pack_gemv_weights_bf16(wh.data(), s.N, s.K, s.K, bf_fast, GemvOptions{isa, 2, false});
        EXPECT_EQ(0, std::memcmp(bf_fast.data.data(), bf_portable.data.data(), bf_fast.data.size())) << isa_name(isa);
      }
    }
}

TEST(Gemv, RejectsBadCalls) {
  PackedGemvWeights w;
  std::vector<bf16_t> wh(64 * 64, 0x3F80);
  pack_gemv_weights_bf16(wh.data(), 64, 64, 64, w);
  std::vector<float> y(17 * 64);
  EXPECT_THROW(gemv_bf16(w, 17, wh.data(), 64, y.data(), 64), Error);
  EXPECT_THROW(gemv_bf16(w, 1, wh.data(), 64, y.data(), 63), Error);
  const QuantizedTensor xq(ScalingMode::kRows1x128, 1, 64, ScaleFormat::kFp32, false);
  EXPECT_THROW(gemv_fp8(w, xq.rowwise, y.data(), 64), Error);  // W8A8 needs FP8 weights
  PackedGemvWeights narrow;
  pack_gemv_weights_bf16(wh.data(), 64, 32, 64, narrow);
  const GemvTarget targets[2] = {{&w, y.data(), 64}, {&narrow, y.data(), 64}};
  EXPECT_THROW(gemv_bf16(targets, 2, 1, wh.data(), 64), Error);  // the matrices' K differ
  EXPECT_THROW(gemv_bf16(targets, 0, 1, wh.data(), 64), Error);
}

}  // namespace
}  // namespace fp8rl
