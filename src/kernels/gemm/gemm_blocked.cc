// The blocked GEMM driver (see gemm_blocked.h for the loop nest and the layouts).
#include "kernels/gemm/gemm_blocked.h"

#include <algorithm>
#include <cstddef>
#include <vector>

#include "core/aligned_buffer.h"
#include "core/thread_pool.h"
#include "numerics/codec.h"

namespace fp8rl::gemm_detail {

void pack_fp8_scales(const GemmOperand& op, int64_t r0, int rows, int tile, int64_t k0, int64_t kc, float* scales) {
  const QuantizedMatrix& q = *op.fp8;
  for (int64_t s = 0; s * kQuantBlock < kc; ++s) {
    const int64_t k = k0 + s * kQuantBlock;
    for (int r = 0; r < tile; ++r)
      scales[s * tile + r] = r >= rows ? 1.0f : op.k_contiguous ? q.scale_at(r0 + r, k) : q.scale_at(k, r0 + r);
  }
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The most bytes of C one task's N block may span for the K blocks to run innermost (measured on a
// 1 MiB L2: the LM head's 110 x 1,536 block, 660 KiB, gains a third).
constexpr int64_t kCBlockBytes = int64_t{1} << 20;

// Per-thread packing storage, grown on demand and kept for the next call (the refit and the
// training step call the same shapes over and over).
struct PackBuffers {
  AlignedBuffer<std::byte> a, b;
  AlignedBuffer<float> a_scales, b_scales;
};

template <typename T>
T* reserve(AlignedBuffer<T>& buffer, size_t size) {
  if (buffer.size() < size) buffer = AlignedBuffer<T>(size);
  return buffer.data();
}

PackBuffers& thread_pack_buffers() {
  thread_local PackBuffers buffers;
  return buffers;
}

// Rounds rows x cols of c (row stride ld) to BF16 values, with bf16_round_f32's bits (called per
// register tile, so without the codec's dispatch through the pool). Not the problem's level: the
// best one the CPU has (kAuto), since every level rounds with the same bits.
void round_rows(float* c, int64_t ld, int64_t rows, int64_t cols) {
  static const detail::Bf16RoundFn round_row = detail::bf16_round_f32_kernel(Isa::kAuto);
  for (int64_t y = 0; y < rows; ++y) round_row(c + y * ld, cols);
}

// Packs rows [r0, r1) of `op` into consecutive panels of `tile` rows: with the back-end's block
// packer where it has one, else panel by panel.
void pack_panels(PackPanelFn panel_fn, PackBlockFn block_fn, const GemmOperand& op, int64_t r0, int64_t r1, int tile,
                 int64_t k0, int64_t kc, std::byte* panels, int64_t panel_bytes, float* scales, int64_t scales_stride) {
  if (block_fn != nullptr) {
    block_fn(op, r0, static_cast<int>(r1 - r0), tile, k0, kc, panels, panel_bytes, scales, scales_stride);
    return;
  }
  for (int64_t i = 0; r0 + i * tile < r1; ++i) {
    const int64_t r = r0 + i * tile;
    panel_fn(op, r, static_cast<int>(std::min<int64_t>(tile, r1 - r)), tile, k0, kc, panels + i * panel_bytes,
             scales ? scales + i * scales_stride : nullptr);
  }
}

// The rectangle of C one task computes.
struct TaskRange {
  int64_t m0, m1, n0, n1;
};

// Where a task's products go. Plain: into C, rounded to BF16 values after the last K block when
// `round`. With `accumulate` (C = C + A B^T, the product formed on its own from zero as in the
// scalar twin): each tile's product is finished in `dst` (row stride ldd), then added to C's tile
// (row stride ldc) right away, while it is still in L1, and C's tile rounded when `round`. A
// product of one K block needs no scratch at all: `dst` is null and each tile is finished in a
// local buffer.
struct TaskOutput {
  float* c;  // C's element (m0, n0)
  int64_t ldc;
  float* dst;  // accumulate: the product's element (m0, n0), or null (one K block); else == c
  int64_t ldd;
  bool accumulate, round;
};

// Runs the blocked loop nest on C[m0:m1, n0:n1] (see TaskOutput).
void run_task(const GemmProblem& p, const GemmBackend& be, const TaskRange& r, const TaskOutput& out) {
  PackBuffers& buf = thread_pack_buffers();
  const int64_t kg = be.k_group;
  const int64_t groups_max = ceil_div(be.kc_block, kg);
  const int64_t slices_max = ceil_div(be.kc_block, kQuantBlock);
  const int64_t a_panel_bytes = groups_max * be.mr * kg * be.element_bytes;
  const int64_t b_panel_bytes = groups_max * be.nr * kg * be.element_bytes;
  const int64_t a_panels_max = ceil_div(std::min(be.mc_block, r.m1 - r.m0), be.mr);
  const int64_t b_panels_max = ceil_div(std::min(be.nc_block, r.n1 - r.n0), be.nr);
  std::byte* a_pack = reserve(buf.a, static_cast<size_t>(a_panels_max * a_panel_bytes));
  std::byte* b_pack = reserve(buf.b, static_cast<size_t>(b_panels_max * b_panel_bytes));
  float* a_scales = be.blockwise ? reserve(buf.a_scales, static_cast<size_t>(a_panels_max * slices_max * be.mr)) : nullptr;
  float* b_scales = be.blockwise ? reserve(buf.b_scales, static_cast<size_t>(b_panels_max * slices_max * be.nr)) : nullptr;
  alignas(64) float edge_tile[16 * 64] = {};  // MR x NR tiles up to 1024 elements; padding lanes stay finite
  if (be.prepare) be.prepare();

  // C[task rows, nc] small enough to stay in cache (a small M: the LM head's chunks, attention's
  // products) runs every K block of an N block in turn, so C is read back from cache rather than
  // from memory; else every N block of a K block, so that C streams through L3 once per K block.
  // A is packed once per K block and N block either way, and each element's sum runs over K in
  // the same order whichever loop is outer: the same bits.
  const bool c_in_cache = (r.m1 - r.m0) * std::min(be.nc_block, r.n1 - r.n0) * 4 <= kCBlockBytes;
  // One K block of one N block: pack B, then every M block of the task against it.
  auto block = [&](int64_t pc, int64_t jc) {
    const int64_t kc = std::min(be.kc_block, p.K - pc);
    const bool load_c = pc > 0, last = pc + kc == p.K;
    // The last K block of a rounded product rounds in the kernel where the back-end can.
    const bool round_product = out.round && !out.accumulate && last;
    const bool round_in_kernel = round_product && be.kernel_rounding != nullptr;
    const bool round_after = round_product && !round_in_kernel;
    const MicroKernelFn kernel = round_in_kernel ? be.kernel_rounding : be.kernel;
    // An unrounded accumulate of one K block (no scratch) adds each full tile in the kernel.
    const bool add_in_kernel = out.accumulate && out.dst == nullptr && !out.round && be.kernel_adding != nullptr;
    const int64_t nc = std::min(be.nc_block, r.n1 - jc);
    const int64_t b_panels = ceil_div(nc, be.nr);
    pack_panels(be.pack_b, be.pack_b_block, p.b, jc, jc + nc, be.nr, pc, kc, b_pack, b_panel_bytes, b_scales,
                slices_max * be.nr);
    for (int64_t ic = r.m0; ic < r.m1; ic += be.mc_block) {
      const int64_t mc = std::min(be.mc_block, r.m1 - ic);
      const int64_t a_panels = ceil_div(mc, be.mr);
      pack_panels(be.pack_a, be.pack_a_block, p.a, ic, ic + mc, be.mr, pc, kc, a_pack, a_panel_bytes, a_scales,
                  slices_max * be.mr);
      for (int64_t j = 0; j < b_panels; ++j) {
        const int64_t n = jc + j * be.nr;
        const int64_t cols = std::min<int64_t>(be.nr, r.n1 - n);
        const std::byte* b_panel = b_pack + j * b_panel_bytes;
        const float* sb = b_scales ? b_scales + j * slices_max * be.nr : nullptr;
        for (int64_t i = 0; i < a_panels; ++i) {
          const int64_t m = ic + i * be.mr;
          const int64_t rows = std::min<int64_t>(be.mr, r.m1 - m);
          const std::byte* a_panel = a_pack + i * a_panel_bytes;
          const float* sa = a_scales ? a_scales + i * slices_max * be.mr : nullptr;
          float* c = out.c + (m - r.m0) * out.ldc + (n - r.n0);
          if (add_in_kernel && rows == be.mr && cols == be.nr) {  // a one-K-block accumulate
            be.kernel_adding(kc, a_panel, b_panel, sa, sb, c, out.ldc, /*load_c=*/false);
            continue;
          }
          // The tile's product: in place (plain), in the scratch, or in the local buffer (a
          // one-K-block accumulate, or an edge tile: the kernel works on a full tile, and only the
          // valid part is read and written).
          float* d = out.dst ? out.dst + (m - r.m0) * out.ldd + (n - r.n0) : nullptr;
          const bool full = rows == be.mr && cols == be.nr && d != nullptr;
          if (full) {
            kernel(kc, a_panel, b_panel, sa, sb, d, out.ldd, load_c);
          } else {
            if (load_c)
              for (int64_t y = 0; y < rows; ++y)
                std::copy(d + y * out.ldd, d + y * out.ldd + cols, edge_tile + y * be.nr);
            kernel(kc, a_panel, b_panel, sa, sb, edge_tile, be.nr, load_c);
            if (d != nullptr && !(out.accumulate && last))
              for (int64_t y = 0; y < rows; ++y)
                std::copy(edge_tile + y * be.nr, edge_tile + y * be.nr + cols, d + y * out.ldd);
          }
          if (!last) continue;
          const float* product = full ? d : edge_tile;
          const int64_t ldp = full ? out.ldd : be.nr;
          if (out.accumulate) {
            for (int64_t y = 0; y < rows; ++y)
              for (int64_t x = 0; x < cols; ++x) c[y * out.ldc + x] += product[y * ldp + x];
            if (out.round) round_rows(c, out.ldc, rows, cols);
          } else if (round_after) {
            round_rows(c, out.ldc, rows, cols);
          }
        }
      }
    }
  };
  if (c_in_cache) {
    for (int64_t jc = r.n0; jc < r.n1; jc += be.nc_block)
      for (int64_t pc = 0; pc < p.K; pc += be.kc_block) block(pc, jc);
  } else {
    for (int64_t pc = 0; pc < p.K; pc += be.kc_block)
      for (int64_t jc = r.n0; jc < r.n1; jc += be.nc_block) block(pc, jc);
  }
}

// Splits C into `parts` rectangles along its longer side, aligned to the register tile, so that
// no two tasks write the same element.
std::vector<TaskRange> split_tasks(const GemmProblem& p, const GemmBackend& be, int parts) {
  std::vector<TaskRange> tasks;
  const bool split_n = p.N >= p.M;
  const int64_t extent = split_n ? p.N : p.M;
  const int64_t tile = split_n ? be.nr : be.mr;
  const int64_t tiles = ceil_div(extent, tile);
  parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(parts, tiles)));
  for (int t = 0; t < parts; ++t) {
    const int64_t begin = std::min(extent, tiles * t / parts * tile);
    const int64_t end = std::min(extent, tiles * (t + 1) / parts * tile);
    if (begin >= end) continue;
    tasks.push_back(split_n ? TaskRange{0, p.M, begin, end} : TaskRange{begin, end, 0, p.N});
  }
  return tasks;
}

}  // namespace

void gemm_blocked(const GemmProblem& p, const GemmBackend& be, int threads) {
  if (p.M == 0 || p.N == 0) return;
  if (p.K == 0) {
    if (!p.accumulate)
      for (int64_t m = 0; m < p.M; ++m) std::fill(p.c + m * p.ldc, p.c + m * p.ldc + p.N, 0.0f);
    return;
  }
  ThreadPool& pool = kernel_thread_pool();
  const int parts = std::min(pool.size(), threads <= 0 ? hardware_threads() : threads);
  const std::vector<TaskRange> tasks = split_tasks(p, be, parts);

  // With `accumulate`, a product of more than one K block is formed in a scratch (starting from
  // zero) and each tile added to C after its last K block (TaskOutput). The scratch is kept for
  // the next call of the caller's thread (wgrad accumulates every step).
  thread_local AlignedBuffer<float> product;
  float* scratch = nullptr;
  if (p.accumulate && p.K > be.kc_block) scratch = reserve(product, static_cast<size_t>(p.M * p.N));
  pool.parallel_for(
      static_cast<int64_t>(tasks.size()),
      [&](int64_t t) {
        const TaskRange& r = tasks[static_cast<size_t>(t)];
        float* c = p.c + r.m0 * p.ldc + r.n0;
        TaskOutput out{c, p.ldc, c, p.ldc, /*accumulate=*/false, p.round_output_bf16};
        if (p.accumulate) {
          out.dst = scratch ? scratch + r.m0 * p.N + r.n0 : nullptr;
          out.ldd = p.N;
          out.accumulate = true;
        }
        run_task(p, be, r, out);
      },
      parts);
}

}  // namespace fp8rl::gemm_detail
