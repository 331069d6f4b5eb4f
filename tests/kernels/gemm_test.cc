// Fast GEMM paths against their scalar twins (kernels/reference) on awkward shapes, with a
// tolerance derived from the inputs (product_check.h); thread-count and batch invariance bit for
// bit.
// ctest-file-label: quick
#include "kernels/gemm/gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/gemm/gemm_blocked.h"
#include "kernels/reference/gemm_reference.h"
#include "numerics/bf16.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "numerics/quantize.h"
#include "tests/kernels/product_check.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

struct Shape3 {
  int64_t M, N, K;
};
// Sizes around the register tiles (8 x 48, 4 x 16), the 128 slices and the K blocks (128, 256,
// 512, 2048).
const Shape3 kShapes[] = {{1, 1, 1},      {1, 129, 127},  {127, 1, 129},   {9, 49, 256}, {129, 127, 1},
                          {33, 97, 1000}, {17, 1000, 65}, {100, 130, 300}, {9, 50, 2200}};
// The option axes (accumulate, pow2 scales) are crossed with the small shapes only, so that the
// suite stays fast under the sanitizers.
bool small(const Shape3& s) { return s.M * s.N * s.K <= 200'000; }

enum class Form { kNT, kNN, kTN };
const char* form_name(Form f) { return f == Form::kNT ? "nt" : f == Form::kNN ? "nn" : "tn"; }

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0.0f, 1.0f, seed, 0);
  return x;
}

// Logical operands a [M,K], b [N,K] stored as the form's physical layout with padded rows.
struct Operands {
  int64_t lda, ldb;
  std::vector<float> a_phys, b_phys;
};
Operands lay_out(Form f, const Shape3& s, const std::vector<float>& a, const std::vector<float>& b) {
  Operands o;
  const bool a_t = f == Form::kTN, b_t = f != Form::kNT;  // stored transposed: [K, M] / [K, N]
  o.lda = (a_t ? s.M : s.K) + 3;
  o.ldb = (b_t ? s.N : s.K) + 5;
  o.a_phys.assign(static_cast<size_t>((a_t ? s.K : s.M) * o.lda), 1e30f);  // padding must never be read
  o.b_phys.assign(static_cast<size_t>((b_t ? s.K : s.N) * o.ldb), 1e30f);
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t k = 0; k < s.K; ++k)
      o.a_phys[static_cast<size_t>(a_t ? k * o.lda + m : m * o.lda + k)] = a[m * s.K + k];
  for (int64_t n = 0; n < s.N; ++n)
    for (int64_t k = 0; k < s.K; ++k)
      o.b_phys[static_cast<size_t>(b_t ? k * o.ldb + n : n * o.ldb + k)] = b[n * s.K + k];
  return o;
}

std::vector<double> magnitudes(const Shape3& s, const std::vector<float>& a, const std::vector<float>& b,
                               const std::vector<float>& c_old) {
  std::vector<double> mag(static_cast<size_t>(s.M * s.N));
  for (int64_t m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < s.N; ++n) {
      double sum = std::fabs(c_old[m * s.N + n]);
      for (int64_t k = 0; k < s.K; ++k) sum += std::fabs(static_cast<double>(a[m * s.K + k]) * b[n * s.K + k]);
      mag[static_cast<size_t>(m * s.N + n)] = sum;
    }
  return mag;
}

std::vector<bf16_t> to_bf16(const std::vector<float>& x) {
  std::vector<bf16_t> h(x.size());
  for (size_t i = 0; i < x.size(); ++i) h[i] = f32_to_bf16(x[i]);
  return h;
}
std::vector<float> round_bf16(const std::vector<float>& x) {
  std::vector<float> r(x.size());
  for (size_t i = 0; i < x.size(); ++i) r[i] = bf16_to_f32(f32_to_bf16(x[i]));
  return r;
}

using F32Gemm = void (*)(int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*, int64_t,
                         bool);
using Bf16Gemm = void (*)(int64_t, int64_t, int64_t, const bf16_t*, int64_t, const bf16_t*, int64_t, float*, int64_t,
                          bool);

TEST(Gemm, Float32AndBf16FormsMatchTheTwins) {
  for (Isa isa : testing::available_isas())
    for (const Shape3& s : kShapes)
      for (Form f : {Form::kNT, Form::kNN, Form::kTN})
        for (bool accumulate : {false, true}) {
          if (accumulate && !small(s)) continue;
          const std::string what = std::string(isa_name(isa)) + " " + form_name(f) + " M=" + std::to_string(s.M) +
                                   " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                                   (accumulate ? " accumulate" : "");
          const std::vector<float> a = random_values(s.M * s.K, 1), b = random_values(s.N * s.K, 2);
          const std::vector<float> c_old = accumulate ? random_values(s.M * s.N, 3) : std::vector<float>(s.M * s.N);
          const GemmOptions options{isa, 2, false};
          {  // FP32: the fast path may contract to FMA, one more rounding per term.
            const Operands o = lay_out(f, s, a, b);
            std::vector<float> fast = c_old, twin = c_old;
            const F32Gemm twins[] = {reference::gemm_nt_f32, reference::gemm_nn_f32, reference::gemm_tn_f32};
            const auto fn = f == Form::kNT ? gemm_nt_f32 : f == Form::kNN ? gemm_nn_f32 : gemm_tn_f32;
            fn(s.M, s.N, s.K, o.a_phys.data(), o.lda, o.b_phys.data(), o.ldb, fast.data(), s.N, accumulate, options);
            twins[static_cast<int>(f)](s.M, s.N, s.K, o.a_phys.data(), o.lda, o.b_phys.data(), o.ldb, twin.data(), s.N,
                                       accumulate);
            testing::expect_close_to_twin("f32 " + what, s.M, s.N, fast.data(), twin.data(), s.N,
                                          magnitudes(s, a, b, c_old), 2 * s.K + 1);
          }
          {  // BF16: exact products, FP32 sums.
            const std::vector<float> ar = round_bf16(a), br = round_bf16(b);
            const Operands o = lay_out(f, s, ar, br);
            const std::vector<bf16_t> ah = to_bf16(o.a_phys), bh = to_bf16(o.b_phys);
            std::vector<float> fast = c_old, twin = c_old;
            const Bf16Gemm twins[] = {reference::gemm_nt_bf16, reference::gemm_nn_bf16, reference::gemm_tn_bf16};
            const auto fn = f == Form::kNT ? gemm_nt_bf16 : f == Form::kNN ? gemm_nn_bf16 : gemm_tn_bf16;
            fn(s.M, s.N, s.K, ah.data(), o.lda, bh.data(), o.ldb, fast.data(), s.N, accumulate, options);
            twins[static_cast<int>(f)](s.M, s.N, s.K, ah.data(), o.lda, bh.data(), o.ldb, twin.data(), s.N, accumulate);
            testing::expect_close_to_twin("bf16 " + what, s.M, s.N, fast.data(), twin.data(), s.N,
                                          magnitudes(s, ar, br, c_old), s.K + 1);
          }
        }
}

// Dequantized values of a quantized matrix, [rows, cols] FP32 (exact products of code and scale
// are what the magnitude bound needs).
std::vector<float> dequantized(const QuantizedMatrix& q) {
  std::vector<float> x(static_cast<size_t>(q.rows * q.cols));
  for (int64_t r = 0; r < q.rows; ++r)
    for (int64_t c = 0; c < q.cols; ++c)
      x[static_cast<size_t>(r * q.cols + c)] =
          e4m3_to_f32(q.codes[static_cast<size_t>(r * q.cols + c)]) * q.scale_at(r, c);
  return x;
}

QuantizedMatrix quantized(int64_t rows, int64_t cols, ScalingMode mode, ScaleFormat format, uint64_t seed) {
  std::vector<float> x = random_values(rows * cols, seed);
  // Spread magnitudes over rows so that blocks get different scales.
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      x[static_cast<size_t>(r * cols + c)] *= std::ldexp(1.0f, static_cast<int>(r % 7) - 3);
  return quantize(TensorView::contiguous(x.data(), DType::kF32, Shape{rows, cols}), mode, format).rowwise.clone();
}

TEST(Gemm, BlockwiseFp8MatchesTheTwin) {
  for (Isa isa : testing::available_isas())
    for (const Shape3& s : kShapes)
      for (ScalingMode b_mode : {ScalingMode::kBlocks128x128, ScalingMode::kRows1x128})
        for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2})
          for (bool accumulate : {false, true}) {
            if ((accumulate || format == ScaleFormat::kPow2) && !small(s)) continue;
            const std::string what = std::string(isa_name(isa)) + " fp8 " + scaling_mode_name(b_mode) +
                                     (format == ScaleFormat::kPow2 ? " pow2" : " fp32") + " M=" + std::to_string(s.M) +
                                     " N=" + std::to_string(s.N) + " K=" + std::to_string(s.K) +
                                     (accumulate ? " accumulate" : "");
            const QuantizedMatrix A = quantized(s.M, s.K, ScalingMode::kRows1x128, format, 11);
            const QuantizedMatrix B = quantized(s.N, s.K, b_mode, format, 12);
            const std::vector<float> c_old = accumulate ? random_values(s.M * s.N, 3) : std::vector<float>(s.M * s.N);
            std::vector<float> fast = c_old, twin = c_old;
            gemm_nt_fp8(A, B, fast.data(), s.N, accumulate, GemmOptions{isa, 2, false});
            reference::gemm_nt_fp8(A, B, twin.data(), s.N, accumulate);
            const int64_t additions = s.K + 2 * ((s.K + 127) / 128) + 1;  // + scale product and promotion
            testing::expect_close_to_twin(what, s.M, s.N, fast.data(), twin.data(), s.N,
                                          magnitudes(s, dequantized(A), dequantized(B), c_old), additions);
          }
}

// dX = dY W on the weight as stored ([K, N] here, 128x128 blocks) gives, bit for bit, the product
// on its column-wise copy ([N, K], the same blocks transposed), on every back-end; so do the twins.
TEST(Gemm, Fp8OnTheWeightAsStoredGivesTheColumnWiseCopysBits) {
  for (const Shape3& s : kShapes)
    for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2})
      for (bool accumulate : {false, true}) {
        if ((accumulate || format == ScaleFormat::kPow2) && !small(s)) continue;
        const QuantizedMatrix A = quantized(s.M, s.K, ScalingMode::kRows1x128, format, 51);
        std::vector<float> w = random_values(s.K * s.N, 52);
        for (int64_t k = 0; k < s.K; ++k)  // rows of blocks with different scales
          for (int64_t n = 0; n < s.N; ++n)
            w[static_cast<size_t>(k * s.N + n)] *= std::ldexp(1.0f, static_cast<int>(k / 128 + n % 5) - 2);
        const QuantizedTensor W = quantize(TensorView::contiguous(w.data(), DType::kF32, Shape{s.K, s.N}),
                                           ScalingMode::kBlocks128x128, format, /*with_columnwise=*/true);
        const std::vector<float> start = accumulate ? random_values(s.M * s.N, 53) : std::vector<float>(s.M * s.N);
        const std::string what = std::string(format == ScaleFormat::kPow2 ? "pow2" : "fp32") +
                                 " M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                                 " K=" + std::to_string(s.K) + (accumulate ? " accumulate" : "");
        for (Isa isa : testing::available_isas()) {
          std::vector<float> stored = start, copy = start;
          gemm_nn_fp8(A, W.rowwise, stored.data(), s.N, accumulate, GemmOptions{isa, 2, false});
          gemm_nt_fp8(A, *W.columnwise, copy.data(), s.N, accumulate, GemmOptions{isa, 2, false});
          EXPECT_EQ(0, std::memcmp(stored.data(), copy.data(), stored.size() * 4)) << isa_name(isa) << " " << what;
        }
        if (!small(s)) continue;
        std::vector<float> stored = start, copy = start;
        reference::gemm_nn_fp8(A, W.rowwise, stored.data(), s.N, accumulate);
        reference::gemm_nt_fp8(A, *W.columnwise, copy.data(), s.N, accumulate);
        EXPECT_EQ(0, std::memcmp(stored.data(), copy.data(), stored.size() * 4)) << "twins " << what;
      }
  // A weight quantized 1x128 along N has no 128-slices along K: refused, by name.
  const QuantizedMatrix A = quantized(4, 256, ScalingMode::kRows1x128, ScaleFormat::kFp32, 54);
  const QuantizedMatrix rows = quantized(256, 64, ScalingMode::kRows1x128, ScaleFormat::kFp32, 55);
  std::vector<float> c(4 * 64);
  EXPECT_THROW(gemm_nn_fp8(A, rows, c.data(), 64), Error);
  EXPECT_THROW(reference::gemm_nn_fp8(A, rows, c.data(), 64, false), Error);
}

// The operands of C [M, N] = A B^T in every type, from seeds seed .. seed + 3: FP32 a [M, K] and
// b [N, K], their BF16 roundings, and FP8 A (1x128) and B (128x128) of their own.
struct TypedOperands {
  std::vector<float> a, b;
  std::vector<bf16_t> ah, bh;
  QuantizedMatrix A, B;
};
TypedOperands typed_operands(const Shape3& s, uint64_t seed) {
  TypedOperands o;
  o.a = random_values(s.M * s.K, seed);
  o.b = random_values(s.N * s.K, seed + 1);
  o.ah = to_bf16(o.a);
  o.bh = to_bf16(o.b);
  o.A = quantized(s.M, s.K, ScalingMode::kRows1x128, ScaleFormat::kFp32, seed + 2);
  o.B = quantized(s.N, s.K, ScalingMode::kBlocks128x128, ScaleFormat::kFp32, seed + 3);
  return o;
}

TEST(Gemm, ResultsAreIdenticalForOneAndTwoThreads) {
  const Shape3 s{70, 200, 300};
  const auto [a, b, ah, bh, A, B] = typed_operands(s, 5);
  const Shape3 tall{300, 70, 200};  // M > N: the split runs along M
  for (Isa isa : testing::available_isas()) {
    std::vector<float> c[2], d[2], e[2], g[2];
    for (int t = 0; t < 2; ++t) {
      const GemmOptions options{isa, t + 1, false};
      c[t].resize(s.M * s.N);
      d[t].resize(s.M * s.N);
      e[t].resize(s.M * s.N);
      g[t].resize(tall.M * tall.N);
      gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, c[t].data(), s.N, false, options);
      gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, d[t].data(), s.N, false, options);
      gemm_nt_fp8(A, B, e[t].data(), s.N, false, options);
      gemm_tn_bf16(tall.M, tall.N, tall.K, bh.data(), tall.M, ah.data(), tall.N, g[t].data(), tall.N, false, options);
    }
    EXPECT_EQ(0, std::memcmp(c[0].data(), c[1].data(), c[0].size() * 4)) << isa_name(isa) << " f32";
    EXPECT_EQ(0, std::memcmp(d[0].data(), d[1].data(), d[0].size() * 4)) << isa_name(isa) << " bf16";
    EXPECT_EQ(0, std::memcmp(e[0].data(), e[1].data(), e[0].size() * 4)) << isa_name(isa) << " fp8";
    EXPECT_EQ(0, std::memcmp(g[0].data(), g[1].data(), g[0].size() * 4)) << isa_name(isa) << " bf16 tn";
  }
}

TEST(Gemm, RoundedOutputEqualsRoundingAfterwards) {
  // Edges in both directions and two K blocks (kc 512), with and without accumulate.
  const Shape3 s{70, 200, 600};
  const auto [a, b, ah, bh, A, B] = typed_operands(s, 9);
  const std::vector<float> start = random_values(s.M * s.N, 13);
  for (Isa isa : testing::available_isas())
    for (int form = 0; form < 3; ++form)
      for (bool accumulate : {false, true}) {
        std::vector<float> plain = start, rounded = start;
        GemmOptions options{isa, 2, false};
        for (std::vector<float>* c : {&plain, &rounded}) {
          options.round_output_bf16 = c == &rounded;
          if (form == 0) gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, c->data(), s.N, accumulate, options);
          if (form == 1)
            gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, c->data(), s.N, accumulate, options);
          if (form == 2) gemm_nt_fp8(A, B, c->data(), s.N, accumulate, options);
        }
        for (float& x : plain) x = bf16_to_f32(f32_to_bf16(x));
        EXPECT_EQ(0, std::memcmp(plain.data(), rounded.data(), plain.size() * 4))
            << isa_name(isa) << " form " << form << (accumulate ? " accumulate" : "");
      }
}

// An unpacked small-product path (gemm_direct_*.cc) must give its level's blocked FP32 bits in
// every form, with accumulate and rounding, on `shapes` (within the path's limits: B at most 8192
// elements, at most 2^20 multiply-adds), and decline larger and empty products (left to the
// blocked driver, which leaves C as it is when K = 0).
using DirectGemm = bool (*)(const gemm_detail::GemmProblem&);
void expect_direct_gives_the_blocked_bits(DirectGemm direct_gemm, const gemm_detail::GemmBackend& blocked_backend,
                                          std::initializer_list<Shape3> shapes) {
  for (const Shape3& s : shapes)
    for (Form f : {Form::kNT, Form::kNN, Form::kTN})
      for (bool accumulate : {false, true})
        for (bool round : {false, true}) {
          const Operands o = lay_out(f, s, random_values(s.M * s.K, 21), random_values(s.N * s.K, 22));
          gemm_detail::GemmProblem p;
          p.M = s.M, p.N = s.N, p.K = s.K;
          p.a = {DType::kF32, o.a_phys.data(), o.lda, f != Form::kTN, nullptr};
          p.b = {DType::kF32, o.b_phys.data(), o.ldb, f == Form::kNT, nullptr};
          p.ldc = s.N + 2;
          p.accumulate = accumulate;
          p.round_output_bf16 = round;
          const std::vector<float> start = random_values(s.M * p.ldc, 23);
          std::vector<float> direct = start, blocked = start;
          p.c = direct.data();
          ASSERT_TRUE(direct_gemm(p)) << s.M << "x" << s.N << "x" << s.K;
          p.c = blocked.data();
          gemm_detail::gemm_blocked(p, blocked_backend, 1);
          EXPECT_EQ(0, std::memcmp(direct.data(), blocked.data(), direct.size() * 4))
              << s.M << "x" << s.N << "x" << s.K << " " << form_name(f) << (accumulate ? " accumulate" : "")
              << (round ? " round" : "");
        }
  std::vector<float> a(128 * 128), b(128 * 128), c(8 * 128);
  gemm_detail::GemmProblem big;
  big.M = 8, big.N = 128, big.K = 128;
  big.a = {DType::kF32, a.data(), 128, true, nullptr};
  big.b = {DType::kF32, b.data(), 128, true, nullptr};
  big.c = c.data();
  big.ldc = 128;
  EXPECT_FALSE(direct_gemm(big));
  big.N = 8, big.K = 0;
  EXPECT_FALSE(direct_gemm(big));
}

// The AVX-512 unpacked path: 6 x 64 register tile.
TEST(Gemm, SmallFloat32ProductsGiveTheBlockedPathsBits) {
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "no AVX-512 kernels on this CPU";
  expect_direct_gives_the_blocked_bits(
      gemm_detail::gemm_direct_f32_avx512, gemm_detail::gemm_backend_avx512(DType::kF32),
      {{1, 1, 1}, {5, 17, 3}, {6, 64, 64}, {7, 65, 120}, {64, 100, 64}, {13, 130, 60}});
}

// The AVX2 unpacked path: 6 x 16 register tile.
TEST(Gemm, SmallFloat32ProductsGiveTheBlockedAvx2PathsBits) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 kernels on this CPU";
  expect_direct_gives_the_blocked_bits(
      gemm_detail::gemm_direct_f32_avx2, gemm_detail::gemm_backend_avx2(DType::kF32),
      {{1, 1, 1}, {5, 17, 3}, {6, 16, 64}, {7, 9, 120}, {6, 8, 5}, {64, 100, 64}, {13, 130, 60}});
}

// Shapes for the AVX2 bit-equality tests: every combination of these sizes crosses the 6 x 16 and
// 4 x 16 tiles, the 128-slices and the K blocks (256 in both back-ends).
const int64_t kAwkwardSizes[] = {1, 7, 127, 129, 200, 300};

// BF16 x BF16 and E4M3 x E4M3 products are exact in FP32, so the AVX2 path's FMA chain is the
// portable path's multiply-then-add chain: the same bits, in every form, accumulate or not.
TEST(Gemm, Avx2Bf16AndFp8GiveThePortableBits) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 kernels on this CPU";
  const GemmOptions avx2{Isa::kAvx2, 2, false}, portable{Isa::kPortable, 2, false};
  int cases = 0;
  for (int64_t M : kAwkwardSizes)
    for (int64_t N : kAwkwardSizes)
      for (int64_t K : kAwkwardSizes) {
        const Shape3 s{M, N, K};
        // The option axes on a subset of the shapes (every shape once), to keep the test fast.
        const bool wide = (M + N + K) % 5 == 0 || s.M * s.N * s.K <= 50'000;
        const std::string what = "M=" + std::to_string(M) + " N=" + std::to_string(N) + " K=" + std::to_string(K);
        const std::vector<float> c_old = random_values(M * N, 31);
        const std::vector<float> a = round_bf16(random_values(M * K, 32)), b = round_bf16(random_values(N * K, 33));
        for (Form f : {Form::kNT, Form::kNN, Form::kTN})
          for (bool accumulate : {false, true}) {
            if (!wide && (f != Form::kNT || accumulate)) continue;
            const Operands o = lay_out(f, s, a, b);
            const std::vector<bf16_t> ah = to_bf16(o.a_phys), bh = to_bf16(o.b_phys);
            const auto fn = f == Form::kNT ? gemm_nt_bf16 : f == Form::kNN ? gemm_nn_bf16 : gemm_tn_bf16;
            std::vector<float> fast = c_old, slow = c_old;
            fn(M, N, K, ah.data(), o.lda, bh.data(), o.ldb, fast.data(), N, accumulate, avx2);
            fn(M, N, K, ah.data(), o.lda, bh.data(), o.ldb, slow.data(), N, accumulate, portable);
            EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * 4))
                << "bf16 " << form_name(f) << " " << what << (accumulate ? " accumulate" : "");
            ++cases;
          }
        for (ScaleFormat format : {ScaleFormat::kFp32, ScaleFormat::kPow2})
          for (ScalingMode b_mode : {ScalingMode::kBlocks128x128, ScalingMode::kRows1x128})
            for (bool accumulate : {false, true}) {
              if (!wide && (format != ScaleFormat::kFp32 || b_mode != ScalingMode::kBlocks128x128 || accumulate))
                continue;
              const QuantizedMatrix A = quantized(M, K, ScalingMode::kRows1x128, format, 34);
              const QuantizedMatrix B = quantized(N, K, b_mode, format, 35);
              std::vector<float> fast = c_old, slow = c_old;
              gemm_nt_fp8(A, B, fast.data(), N, accumulate, avx2);
              gemm_nt_fp8(A, B, slow.data(), N, accumulate, portable);
              EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * 4))
                  << "fp8 " << scaling_mode_name(b_mode) << (format == ScaleFormat::kPow2 ? " pow2 " : " fp32 ") << what
                  << (accumulate ? " accumulate" : "");
              ++cases;
            }
      }
  EXPECT_GT(cases, 216 * 2);
  // Rounded output too (rounded in a pass over each finished tile).
  const Shape3 s{129, 200, 300};
  const auto [a, b, ah, bh, A, B] = typed_operands(s, 41);
  std::vector<float> fast(s.M * s.N), slow(s.M * s.N);
  GemmOptions ra = avx2, rp = portable;
  ra.round_output_bf16 = rp.round_output_bf16 = true;
  gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, fast.data(), s.N, false, ra);
  gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, slow.data(), s.N, false, rp);
  EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * 4)) << "bf16 rounded";
  gemm_nt_fp8(A, B, fast.data(), s.N, false, ra);
  gemm_nt_fp8(A, B, slow.data(), s.N, false, rp);
  EXPECT_EQ(0, std::memcmp(fast.data(), slow.data(), fast.size() * 4)) << "fp8 rounded";
}

// FP32: one FMA per term, one chain per element in both back-ends, so the AVX2 path gives the
// AVX-512 path's bits, on products small enough for the unpacked paths of both and on large ones.
TEST(Gemm, Avx2Float32GivesTheAvx512Bits) {
  if (!cpu_features().has_avx2_kernels()) GTEST_SKIP() << "no AVX2 kernels on this CPU";
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "no AVX-512 kernels on this CPU";
  const Shape3 shapes[] = {{1, 1, 1},     {5, 17, 3},    {7, 65, 120},    {13, 130, 60},   {64, 100, 64},
                           {64, 256, 64}, {127, 129, 7}, {200, 300, 129}, {300, 127, 300}, {129, 200, 1000}};
  for (const Shape3& s : shapes)
    for (Form f : {Form::kNT, Form::kNN, Form::kTN})
      for (bool accumulate : {false, true})
        for (int threads : {1, 2}) {
          const Operands o = lay_out(f, s, random_values(s.M * s.K, 51), random_values(s.N * s.K, 52));
          const std::vector<float> c_old = random_values(s.M * s.N, 53);
          const auto fn = f == Form::kNT ? gemm_nt_f32 : f == Form::kNN ? gemm_nn_f32 : gemm_tn_f32;
          std::vector<float> fast = c_old, wide = c_old;
          fn(s.M, s.N, s.K, o.a_phys.data(), o.lda, o.b_phys.data(), o.ldb, fast.data(), s.N, accumulate,
             GemmOptions{Isa::kAvx2, threads, false});
          fn(s.M, s.N, s.K, o.a_phys.data(), o.lda, o.b_phys.data(), o.ldb, wide.data(), s.N, accumulate,
             GemmOptions{Isa::kAvx512, threads, false});
          EXPECT_EQ(0, std::memcmp(fast.data(), wide.data(), fast.size() * 4))
              << s.M << "x" << s.N << "x" << s.K << " " << form_name(f) << (accumulate ? " accumulate" : "")
              << " threads " << threads;
        }
}

// One row of a kRows1x128 matrix as a matrix of its own (its codes and scales are independent of
// the other rows).
QuantizedMatrix row_of(const QuantizedMatrix& q, int64_t r) {
  QuantizedMatrix one(ScalingMode::kRows1x128, 1, q.cols);
  std::memcpy(one.codes.data(), q.codes.data() + r * q.cols, static_cast<size_t>(q.cols));
  const int64_t sc = q.scales().cols;
  std::memcpy(one.scale_inv.data(), q.scale_inv.data() + r * sc, static_cast<size_t>(sc) * 4);
  return one;
}

TEST(Gemm, RowsDoNotDependOnTheOtherRows) {
  // C of all M rows (1 MiB and more) runs the K blocks outermost; fewer rows run them innermost
  // (gemm_blocked.cc): the same bits either way.
  const Shape3 s{180, 1500, 300};
  const std::vector<bf16_t> ah = to_bf16(random_values(s.M * s.K, 9)), bh = to_bf16(random_values(s.N * s.K, 10));
  const QuantizedMatrix A = quantized(s.M, s.K, ScalingMode::kRows1x128, ScaleFormat::kFp32, 7);
  const QuantizedMatrix B = quantized(s.N, s.K, ScalingMode::kBlocks128x128, ScaleFormat::kFp32, 8);
  for (Isa isa : testing::available_isas()) {
    const GemmOptions options{isa, 1, true};
    std::vector<float> full(s.M * s.N), full8(s.M * s.N), one(s.N);
    gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, full.data(), s.N, false, options);
    gemm_nt_fp8(A, B, full8.data(), s.N, false, options);
    for (int64_t m : {0, 5, 8, 179}) {
      gemm_nt_bf16(1, s.N, s.K, ah.data() + m * s.K, s.K, bh.data(), s.K, one.data(), s.N, false, options);
      EXPECT_EQ(0, std::memcmp(one.data(), full.data() + m * s.N, s.N * 4)) << isa_name(isa) << " bf16 row " << m;
      gemm_nt_fp8(row_of(A, m), B, one.data(), s.N, false, options);
      EXPECT_EQ(0, std::memcmp(one.data(), full8.data() + m * s.N, s.N * 4)) << isa_name(isa) << " fp8 row " << m;
    }
    // A different M (rows 3..11 on their own): the same rows again.
    std::vector<float> part(9 * s.N);
    gemm_nt_bf16(9, s.N, s.K, ah.data() + 3 * s.K, s.K, bh.data(), s.K, part.data(), s.N, false, options);
    EXPECT_EQ(0, std::memcmp(part.data(), full.data() + 3 * s.N, part.size() * 4)) << isa_name(isa) << " bf16 M=9";
  }
}

// Each element's sum runs over K in index order whatever the K block: the accumulators continue
// through C, which holds FP32 exactly. So every back-end gives the same bits with its own kc_block,
// with 384 (block edges elsewhere, so a kernel that dropped C would differ) and with 2304 (all of
// K in one block: an accumulating product then needs no scratch), rounded output and accumulate
// included.
TEST(Gemm, TheKBlockSizeDoesNotChangeTheBits) {
  const Shape3 s{20, 100, 2300};
  const auto [a, b, ah, bh, A, B] = typed_operands(s, 31);
  const std::vector<float> start = random_values(s.M * s.N, 37);
  std::vector<std::pair<const char*, const gemm_detail::GemmBackend& (*)(DType)>> backends = {
      {"portable", gemm_detail::gemm_backend_portable}};
  if (cpu_features().has_avx2_kernels()) backends.push_back({"avx2", gemm_detail::gemm_backend_avx2});
  if (cpu_features().has_avx512_kernels()) backends.push_back({"avx512", gemm_detail::gemm_backend_avx512});
  if (cpu_features().has_amx_kernels()) backends.push_back({"amx", gemm_detail::gemm_backend_amx});
  for (const auto& [name, backend_of] : backends)
    for (DType type : {DType::kBF16, DType::kE4M3})
      for (bool accumulate : {false, true})
        for (int64_t kc : {384, 2304}) {
          const gemm_detail::GemmBackend& own = backend_of(type);
          gemm_detail::GemmBackend other = own;
          other.kc_block = kc;
          gemm_detail::GemmProblem p;
          p.M = s.M, p.N = s.N, p.K = s.K;
          if (type == DType::kBF16) {
            p.a = {type, ah.data(), s.K, true, nullptr};
            p.b = {type, bh.data(), s.K, true, nullptr};
          } else {
            p.a = {type, A.codes.data(), s.K, true, &A};
            p.b = {type, B.codes.data(), s.K, true, &B};
          }
          p.ldc = s.N;
          p.accumulate = accumulate;
          p.round_output_bf16 = true;
          std::vector<float> c_own = start, c_other = start;
          p.c = c_own.data();
          gemm_detail::gemm_blocked(p, own, 1);
          p.c = c_other.data();
          gemm_detail::gemm_blocked(p, other, 1);
          EXPECT_EQ(0, std::memcmp(c_own.data(), c_other.data(), c_own.size() * 4))
              << name << " " << dtype_name(type) << " kc " << own.kc_block << " vs " << other.kc_block
              << (accumulate ? " accumulate" : "");
        }
}

// A public call of each operand type (every form goes through the same metered path) adds its
// call, 2 M N K flops and a non-negative time to the running totals; a rejected call and calls
// from inside pool tasks add nothing.
TEST(Gemm, TotalsCountEveryCall) {
  const Shape3 s{3, 5, 7};
  const auto [a, b, ah, bh, A, B] = typed_operands(s, 41);
  std::vector<float> c(s.M * s.N);
  const GemmTotals before = gemm_totals();
  gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, c.data(), s.N);
  gemm_tn_bf16(s.M, s.N, s.K, ah.data(), s.M, bh.data(), s.N, c.data(), s.N);
  gemm_nt_fp8(A, B, c.data(), s.N);
  EXPECT_THROW(gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, c.data(), s.N - 1), Error);
  // Calls from inside pool tasks are left out.
  kernel_thread_pool().parallel_for(2, [&](int64_t) {
    std::vector<float> own(s.M * s.N);
    gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, own.data(), s.N);
  });
  const GemmTotals d = gemm_totals() - before;
  EXPECT_EQ(d.calls, 3);
  EXPECT_EQ(d.flops, 3 * 2 * s.M * s.N * s.K);
  EXPECT_GE(d.seconds, 0.0);
}

// The AVX-512 BF16 back-end's block packer writes the bytes its panel packer writes, panel for
// panel, zero padding included and nothing past the pairs: both source layouts, the A and B tiles,
// odd K, K offsets and rows that end inside a panel.
TEST(Gemm, Avx512BlockPackingGivesThePanelPackersBytes) {
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "the AVX-512 back-end needs AVX-512 BF16";
  const gemm_detail::GemmBackend& be = gemm_detail::gemm_backend_avx512(DType::kBF16);
  ASSERT_NE(be.pack_a_block, nullptr);
  const int64_t R = 203, K = 517, ld = 531;  // R rows of K, stored both ways with a padded stride
  const std::vector<bf16_t> values = to_bf16(random_values(ld * ld, 9));
  struct Range {
    int64_t first, count;
  };
  for (bool k_contiguous : {true, false})
    for (int tile : {be.mr, be.nr})
      for (Range r : {Range{0, 1}, Range{5, 8}, Range{3, 37}, Range{0, 192}, Range{11, 192}})
        for (Range k : {Range{0, 256}, Range{256, 256}, Range{3, 1}, Range{1, 255}, Range{261, 256}}) {
          ASSERT_LE(r.first + r.count, R);
          ASSERT_LE(k.first + k.count, K);
          const gemm_detail::GemmOperand op{DType::kBF16, values.data(), ld, k_contiguous, nullptr};
          const int64_t panels = (r.count + tile - 1) / tile;
          const int64_t panel_bytes = be.kc_block / 2 * tile * 4;
          std::vector<uint32_t> want(static_cast<size_t>(panels * panel_bytes / 4), 0xDEADBEEF), got = want;
          for (int64_t i = 0; i < panels; ++i)
            be.pack_a(op, r.first + i * tile, static_cast<int>(std::min<int64_t>(tile, r.count - i * tile)), tile,
                      k.first, k.count, want.data() + i * panel_bytes / 4, nullptr);
          be.pack_a_block(op, r.first, static_cast<int>(r.count), tile, k.first, k.count, got.data(), panel_bytes,
                          nullptr, 0);
          EXPECT_EQ(got, want) << (k_contiguous ? "K contiguous" : "rows contiguous") << ", tile " << tile << ", rows "
                               << r.first << "+" << r.count << ", k " << k.first << "+" << k.count;
        }
}

// The AVX-512 FP8 packer, which decodes codes as it packs them, writes the bytes of the BF16 panel
// packer on the codes decoded beforehand (e4m3_decode_bf16, the codec every path agrees with),
// and the scales of pack_fp8_scales: every code (NaN and both zeros included), both layouts, the
// A and B tiles, odd K, K offsets and rows that end inside a panel.
TEST(Gemm, Avx512Fp8PackingGivesTheDecodedCodesBf16Bytes) {
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "the AVX-512 back-end needs AVX-512 BF16";
  const gemm_detail::GemmBackend& fp8 = gemm_detail::gemm_backend_avx512(DType::kE4M3);
  const gemm_detail::GemmBackend& bf16 = gemm_detail::gemm_backend_avx512(DType::kBF16);
  const int64_t R = 203, K = 517;
  struct Range {
    int64_t first, count;
  };
  for (bool k_contiguous : {true, false}) {
    // [R, K] 1x128 (an activation) or [K, R] 128x128 (a weight as stored, read as dX = dY W reads it).
    const int64_t rows = k_contiguous ? R : K, cols = k_contiguous ? K : R;
    QuantizedMatrix q =
        quantize(TensorView::contiguous(random_values(rows * cols, 10).data(), DType::kF32, Shape{rows, cols}),
                 k_contiguous ? ScalingMode::kRows1x128 : ScalingMode::kBlocks128x128, ScaleFormat::kFp32)
            .rowwise.clone();
    for (size_t i = 0; i < q.codes.size(); ++i) q.codes[i] = static_cast<uint8_t>(i * 7);  // every code
    std::vector<bf16_t> decoded(q.codes.size());
    e4m3_decode_bf16(q.codes.data(), decoded.data(), static_cast<int64_t>(q.codes.size()), Isa::kPortable);
    const gemm_detail::GemmOperand op{DType::kE4M3, q.codes.data(), cols, k_contiguous, &q};
    const gemm_detail::GemmOperand op_bf16{DType::kBF16, decoded.data(), cols, k_contiguous, nullptr};
    for (int tile : {fp8.mr, fp8.nr})
      for (Range r : {Range{0, 1}, Range{5, 8}, Range{3, 37}, Range{11, 48}})
        for (Range k : {Range{0, 256}, Range{256, 256}, Range{3, 1}, Range{1, 255}, Range{261, 256}}) {
          const int rn = static_cast<int>(std::min<int64_t>(tile, r.count));
          std::vector<uint32_t> want(static_cast<size_t>(fp8.kc_block / 2 * tile), 0xDEADBEEF), got = want;
          std::vector<float> scales(static_cast<size_t>(fp8.kc_block / 128 * tile), -1.0f), want_scales = scales;
          bf16.pack_a(op_bf16, r.first, rn, tile, k.first, k.count, want.data(), nullptr);
          gemm_detail::pack_fp8_scales(op, r.first, rn, tile, k.first, k.count, want_scales.data());
          fp8.pack_a(op, r.first, rn, tile, k.first, k.count, got.data(), scales.data());
          const std::string what = std::string(k_contiguous ? "K contiguous" : "rows contiguous") + ", tile " +
                                   std::to_string(tile) + ", rows " + std::to_string(r.first) + "+" +
                                   std::to_string(rn) + ", k " + std::to_string(k.first) + "+" +
                                   std::to_string(k.count);
          EXPECT_EQ(got, want) << what;
          EXPECT_EQ(scales, want_scales) << what;
        }
  }
}

}  // namespace
}  // namespace fp8rl
