// Decode GEMV: packing of weights and activations, and dispatch to the ISA back-ends.
#include "kernels/gemv/gemv.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "kernels/gemv/gemv_kernels.h"
#include "numerics/codec.h"
#include "numerics/e4m3.h"
#include "numerics/quantize.h"

namespace fp8rl {
namespace {

using gemv_detail::PackedActivations;

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int thread_count(int requested) {
  return std::min(kernel_thread_pool().size(), requested <= 0 ? hardware_threads() : requested);
}

// Sizes `out` for a [N, K] matrix of `type`, reusing its storage when the shape is unchanged.
void shape_packed(PackedGemvWeights& out, DType type, int64_t N, int64_t K) {
  FP8RL_CHECK(N > 0 && K > 0, "gemv weights: empty shape [{}, {}]", N, K);
  const bool same = out.type == type && out.rows == N && out.cols == K && !out.data.empty();
  out.type = type;
  out.rows = N;
  out.cols = K;
  if (same) return;
  out.data = AlignedBuffer<uint8_t>(static_cast<size_t>(out.strips() * out.strip_bytes()));
  out.scales = type == DType::kE4M3
                   ? AlignedBuffer<float>(static_cast<size_t>(ceil_div(N, kQuantBlock) * ceil_div(K, kQuantBlock)))
                   : AlignedBuffer<float>();
}

// Runs fn(band) over the 128-row bands of W on the pool.
template <typename Fn>
void for_each_band(int64_t N, int threads, const Fn& fn) {
  kernel_thread_pool().parallel_for(ceil_div(N, kQuantBlock), [&](int64_t band) { fn(band); }, thread_count(threads));
}

// The kernels' activation layout (gemv_kernels.h): x.pairs, or x.tiles for the AMX path.
using PackActivationsFn = void (*)(int64_t M, const bf16_t* x, int64_t ldx, int64_t K, PackedActivations& out);

void pack_activation_pairs(int64_t M, const bf16_t* x, int64_t ldx, int64_t K, PackedActivations& out) {
  const int64_t pairs = ceil_div(K, 2);
  out.pairs = AlignedBuffer<uint32_t>(static_cast<size_t>(pairs * M));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t p = 0; p < pairs; ++p) {
      const uint32_t lo = x[m * ldx + 2 * p];
      const uint32_t hi = 2 * p + 1 < K ? x[m * ldx + 2 * p + 1] : 0u;
      out.pairs[static_cast<size_t>(p * M + m)] = lo | (hi << 16);
    }
}

void pack_activation_tiles(int64_t M, const bf16_t* x, int64_t ldx, int64_t K, PackedActivations& out) {
  // Chunk c of row m is x[m][32c, 32c + 32): one 64-byte tile row, zero past K and past M.
  const int64_t chunks = ceil_div(ceil_div(K, 2), 16);
  out.tiles = AlignedBuffer<uint32_t>(static_cast<size_t>(chunks * 256));
  auto* tiles = reinterpret_cast<bf16_t*>(out.tiles.data());
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t m = 0; m < M; ++m)
      std::copy(x + m * ldx + 32 * c, x + m * ldx + std::min(K, 32 * c + 32), tiles + (c * 16 + m) * 32);
}

// The activation layout and the strip kernel of each level: AMX reads tiles, the others pairs.
constexpr IsaTable<PackActivationsFn> kPackActivations{.portable = pack_activation_pairs,
                                                       .amx = pack_activation_tiles};
using StripsFn = void (*)(const PackedGemvWeights& W, const PackedActivations& x, const gemv_detail::GemvDst& dst,
                          int64_t s0, int64_t s1);
constexpr IsaTable<StripsFn> kStrips{.portable = gemv_detail::gemv_strips_portable,
                                     .avx2 = gemv_detail::gemv_strips_avx2,
                                     .avx512 = gemv_detail::gemv_strips_avx512,
                                     .amx = gemv_detail::gemv_strips_amx};

// The weight packers: the strip layout is the same at every level; AVX2 packs with the portable
// code, AMX with AVX-512's.
constexpr IsaTable<void (*)(const bf16_t*, int64_t, int64_t, int64_t, uint8_t*)> kPackBf16Strips{
    .portable = gemv_detail::pack_bf16_strips_portable, .avx512 = gemv_detail::pack_bf16_strips_avx512};
constexpr IsaTable<void (*)(const uint8_t*, int64_t, int64_t, int64_t, uint8_t*)> kPackFp8Strips{
    .portable = gemv_detail::pack_fp8_strips_portable, .avx512 = gemv_detail::pack_fp8_strips_avx512};

// Activations for the kernels of `isa` (a call_level), scales 1 (the FP8 caller overwrites them).
void pack_activations_bf16(int64_t M, const bf16_t* x, int64_t ldx, int64_t K, Isa isa, PackedActivations& out) {
  out.M = M;
  out.K = K;
  out.scales = AlignedBuffer<float>(static_cast<size_t>(M * ceil_div(K, kQuantBlock)));
  std::fill(out.scales.begin(), out.scales.end(), 1.0f);
  pick(kPackActivations, isa)(M, x, ldx, K, out);
}

void check_call(const GemvTarget* targets, int num_targets, int64_t M, int64_t K) {
  FP8RL_CHECK(num_targets >= 1, "gemv: no weight matrices");
  FP8RL_CHECK(M >= 1 && M <= kGemvMaxRows, "gemv: M must be in 1..{}, got {} (split larger batches)", kGemvMaxRows, M);
  for (int i = 0; i < num_targets; ++i) {
    const PackedGemvWeights& W = *targets[i].W;
    FP8RL_CHECK(!W.data.empty(), "gemv: weights are not packed");
    FP8RL_CHECK(W.cols == K, "gemv: x has K = {}, W has K = {}", K, W.cols);
    FP8RL_CHECK(targets[i].ldy >= W.rows, "gemv: ldy {} < N {}", targets[i].ldy, W.rows);
  }
}

// The level a call runs on: options.isa resolved, except that without batch invariance a single
// row on an AMX machine runs on AVX-512, whose decode in registers beats the tile path there
// (a tile product costs as much for 1 row as for 16; docs/kernels.md has the figures). This is
// a per-call rule on top of the tables, not their fallback: kPackActivations and kStrips are
// picked at the level it returns, so the layout and the kernel always agree.
Isa call_level(const GemvOptions& options, int64_t M) {
  const Isa isa = resolve_isa(options.isa);
  return isa == Isa::kAmx && !options.batch_invariant && M == 1 ? Isa::kAvx512 : isa;
}

void run(const GemvTarget* targets, int num_targets, const PackedActivations& x, Isa isa, const GemvOptions& options) {
  // Tasks of 8 strips (128 rows): large enough to amortise the hand-out, small enough to balance.
  // Task t belongs to the first target whose tasks end after t.
  constexpr int64_t per_task = 8;
  const StripsFn strips = pick(kStrips, isa);
  std::vector<int64_t> task_end(static_cast<size_t>(num_targets));
  int64_t tasks = 0;
  for (int i = 0; i < num_targets; ++i) task_end[static_cast<size_t>(i)] = tasks += ceil_div(targets[i].W->strips(), per_task);
  kernel_thread_pool().parallel_for(
      tasks,
      [&](int64_t t) {
        int i = 0;
        while (t >= task_end[static_cast<size_t>(i)]) ++i;
        const PackedGemvWeights& W = *targets[i].W;
        const gemv_detail::GemvDst dst{targets[i].y, targets[i].ldy, options.round_output_bf16};
        const int64_t first = i == 0 ? 0 : task_end[static_cast<size_t>(i - 1)];
        const int64_t s0 = (t - first) * per_task, s1 = std::min(W.strips(), s0 + per_task);
        strips(W, x, dst, s0, s1);
      },
      thread_count(options.threads));
}

}  // namespace

void pack_gemv_weights_bf16(const bf16_t* W, int64_t N, int64_t K, int64_t ldw, PackedGemvWeights& out,
                            const GemvOptions& options) {
  FP8RL_CHECK(ldw >= K, "gemv weights: ldw {} < K {}", ldw, K);
  shape_packed(out, DType::kBF16, N, K);
  const auto pack = pick(kPackBf16Strips, options.isa);
  for_each_band(N, options.threads, [&](int64_t band) {
    const int64_t r0 = band * kQuantBlock, rows = std::min(kQuantBlock, N - r0);
    pack(W + r0 * ldw, rows, K, ldw, out.data.data() + (r0 / kGemvStrip) * out.strip_bytes());
  });
}

void pack_gemv_weights_fp8(const QuantizedMatrix& W, PackedGemvWeights& out, const GemvOptions& options) {
  FP8RL_CHECK(W.mode == ScalingMode::kBlocks128x128, "gemv weights: FP8 W must be quantized 128x128, got {}", W.str());
  shape_packed(out, DType::kE4M3, W.rows, W.cols);
  const auto pack = pick(kPackFp8Strips, options.isa);
  std::copy(W.scale_inv.begin(), W.scale_inv.end(), out.scales.begin());
  for_each_band(W.rows, options.threads, [&](int64_t band) {
    const int64_t r0 = band * kQuantBlock, rows = std::min(kQuantBlock, W.rows - r0);
    pack(W.codes.data() + r0 * W.cols, rows, W.cols, W.cols, out.data.data() + (r0 / kGemvStrip) * out.strip_bytes());
  });
}

void pack_gemv_weights_fp8(const float* W, int64_t N, int64_t K, int64_t ldw, ScaleFormat format,
                           PackedGemvWeights& out, const GemvOptions& options) {
  FP8RL_CHECK(ldw >= K, "gemv weights: ldw {} < K {}", ldw, K);
  shape_packed(out, DType::kE4M3, N, K);
  const Isa isa = resolve_isa(options.isa);
  const auto pack = pick(kPackFp8Strips, isa);
  const int64_t scale_cols = ceil_div(K, kQuantBlock);
  // One 128-row band at a time: its 128x128 blocks are the full matrix's blocks, so quantizing the
  // band alone gives the same bytes and scales; the band's codes (128 x K) stay in L2 for the
  // repack.
  for_each_band(N, options.threads, [&](int64_t band) {
    thread_local QuantizedTensor scratch;
    const int64_t r0 = band * kQuantBlock, rows = std::min(kQuantBlock, N - r0);
    if (scratch.rows() != rows || scratch.cols() != K || scratch.scale_format != format)
      scratch = QuantizedTensor(ScalingMode::kBlocks128x128, rows, K, format, /*with_columnwise=*/false);
    quantize_into(TensorView::matrix(const_cast<float*>(W + r0 * ldw), DType::kF32, rows, K, ldw), scratch, isa);
    std::copy(scratch.rowwise.scale_inv.begin(), scratch.rowwise.scale_inv.end(),
              out.scales.begin() + band * scale_cols);
    pack(scratch.rowwise.codes.data(), rows, K, K, out.data.data() + (r0 / kGemvStrip) * out.strip_bytes());
  });
}

void gemv_bf16(const GemvTarget* targets, int num_targets, int64_t M, const bf16_t* x, int64_t ldx,
               const GemvOptions& options) {
  FP8RL_CHECK(num_targets >= 1, "gemv: no weight matrices");
  const int64_t K = targets[0].W->cols;
  check_call(targets, num_targets, M, K);
  FP8RL_CHECK(ldx >= K, "gemv: ldx {} < K {}", ldx, K);
  const Isa isa = call_level(options, M);
  thread_local PackedActivations packed;
  pack_activations_bf16(M, x, ldx, K, isa, packed);
  run(targets, num_targets, packed, isa, options);
}

void gemv_fp8(const GemvTarget* targets, int num_targets, const QuantizedMatrix& x, const GemvOptions& options) {
  check_call(targets, num_targets, x.rows, x.cols);
  for (int i = 0; i < num_targets; ++i)
    FP8RL_CHECK(targets[i].W->type == DType::kE4M3, "gemv_fp8: W8A8 needs FP8 weights");
  FP8RL_CHECK(x.mode == ScalingMode::kRows1x128, "gemv_fp8: x must be quantized 1x128, got {}", x.str());
  const int64_t M = x.rows, K = x.cols;
  thread_local std::vector<bf16_t> decoded;
  decoded.resize(static_cast<size_t>(M * K));
  e4m3_decode_bf16(x.codes.data(), decoded.data(), M * K, options.isa);  // exact
  const Isa isa = call_level(options, M);
  thread_local PackedActivations packed;
  pack_activations_bf16(M, decoded.data(), K, K, isa, packed);
  std::copy(x.scale_inv.begin(), x.scale_inv.end(), packed.scales.begin());  // [M][ceil(K/128)]
  run(targets, num_targets, packed, isa, options);
}

void gemv_bf16(const PackedGemvWeights& W, int64_t M, const bf16_t* x, int64_t ldx, float* y, int64_t ldy,
               const GemvOptions& options) {
  const GemvTarget target{&W, y, ldy};
  gemv_bf16(&target, 1, M, x, ldx, options);
}

void gemv_fp8(const PackedGemvWeights& W, const QuantizedMatrix& x, float* y, int64_t ldy, const GemvOptions& options) {
  const GemvTarget target{&W, y, ldy};
  gemv_fp8(&target, 1, x, options);
}

int64_t gemm_from_rows(DType weights) {
  if (weights == DType::kBF16) return 4 * kGemvMaxRows + 1;
  static const int64_t fp8_rows = resolve_isa(Isa::kAuto) == Isa::kAvx512 ? 4 * kGemvMaxRows + 1 : kGemvMaxRows + 1;
  return fp8_rows;
}

}  // namespace fp8rl
