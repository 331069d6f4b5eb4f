// Block loops of the quantizers. The per-run inner loops come from quantize_kernels.h, so the
// structure below is shared by every instruction set.
#include "numerics/quantize.h"

#include <emmintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "core/thread_pool.h"
#include "numerics/quantize_kernels.h"

namespace fp8rl {
namespace {

using detail::DestKernels;
using detail::QuantizeKernels;
using detail::SourceKernels;

constexpr int64_t kB = kQuantBlock;
// Column panel of the 128x1 quantizer: 128 rows x 512 FP32 columns = 256 KiB stays in L2
// between the amax pass and the encode pass.
constexpr int64_t kColPanel = 512;

// The kernel sets per level; AMX has none of its own and runs AVX-512's.
constexpr IsaTable<const QuantizeKernels& (*)()> kQuantizeKernels{.portable = detail::quantize_kernels_portable,
                                                                  .avx2 = detail::quantize_kernels_avx2,
                                                                  .avx512 = detail::quantize_kernels_avx512};

const QuantizeKernels& kernels_for(Isa isa) { return pick(kQuantizeKernels, isa)(); }

// A read-only 2-D source: rows `ld` elements apart, `elem` bytes per element.
struct Source {
  const std::byte* data;
  int64_t rows, cols, ld;
  size_t elem;
  const void* at(int64_t r, int64_t c) const { return data + (r * ld + c) * static_cast<int64_t>(elem); }
};

bool is_valid_mode(ScalingMode mode) {
  switch (mode) {
    case ScalingMode::kPerTensor:
    case ScalingMode::kRows1x128:
    case ScalingMode::kCols128x1:
    case ScalingMode::kBlocks128x128: return true;
  }
  return false;
}

void check_matrix_view(const TensorView& v, const char* what) {
  FP8RL_CHECK(v.rank() == 2, "{}: expected a 2-D tensor, got {}", what, v.str());
  FP8RL_CHECK(v.dtype == DType::kF32 || v.dtype == DType::kBF16, "{}: expected dtype f32 or bf16, got {}", what,
              v.str());
  FP8RL_CHECK(v.strides[1] == 1, "{}: columns must be contiguous (stride 1), got {}", what, v.str());
  FP8RL_CHECK(v.strides[0] >= v.shape[1], "{}: row stride must be >= the column count, got {}", what, v.str());
  FP8RL_CHECK(v.data != nullptr || v.numel() == 0, "{}: null data pointer for {}", what, v.str());
}

void check_matrix_storage(const QuantizedMatrix& q, const char* what) {
  FP8RL_CHECK(is_valid_mode(q.mode), "{}: unsupported scaling mode {}", what, static_cast<int>(q.mode));
  FP8RL_CHECK_EQ(q.codes.size(), static_cast<size_t>(q.rows * q.cols));
  FP8RL_CHECK_EQ(q.scale_inv.size(), static_cast<size_t>(q.scales().numel()));
}

// ---- row-wise modes -------------------------------------------------------------------------

// Multipliers of `count` blocks from their amax bit patterns; writes the dequantization scales
// 1/qs to scale_inv[i * scale_stride].
void block_multipliers(const uint32_t* amax, int64_t count, ScaleFormat f, float* qs, float* scale_inv,
                       int64_t scale_stride) {
  for (int64_t i = 0; i < count; ++i) {
    qs[i] = quant_multiplier_from_amax_bits(amax[i], f);
    scale_inv[i * scale_stride] = 1.0f / qs[i];
  }
}

// Asks for [p, p + bytes) to be brought into the caches, one request per 64-byte line.
void prefetch_range(const void* p, int64_t bytes) {
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) __builtin_prefetch(c + i, 0, 3);
}

// The encode pass runs from L1/L2 and is compute-bound, the amax pass streams from memory and is
// load-bound: prefetching the *next* row (or panel) piece by piece during the encode pass makes
// the two overlap instead of alternating.
constexpr int64_t kPrefetchPiece = 8 * kB;  // columns encoded per prefetch request batch

// Codes of a matrix this large go out with non-temporal stores (SourceKernels::scale_encode_blocks):
// they would leave the caches before anything reads them, and skipping the read-for-ownership of
// every output line saves a fifth of the memory traffic. Smaller outputs (a micro-batch's
// activations, read by the next GEMM) stay in cache.
constexpr int64_t kStreamingOutputBytes = int64_t{8} << 20;
bool streaming_output(const QuantizedMatrix& q) { return q.rows * q.cols >= kStreamingOutputBytes; }
// Orders a task's non-temporal stores before the pool reports the task done.
void end_streaming(bool streaming) {
  if (streaming) _mm_sfence();
}

// Rows in tasks of kRowsPerTask on the kernel pool (rows are independent: same bits).
constexpr int64_t kRowsPerTask = 16;

void quantize_rows_1x128(const Source& x, const SourceKernels& k, ScaleFormat f, QuantizedMatrix& q) {
  const bool streaming = streaming_output(q);
  const int64_t blocks = q.scales().cols;
  parallel_for_ranges(x.rows, kRowsPerTask, [&](int64_t r_begin, int64_t r_end) {
    std::vector<uint32_t> amax(static_cast<size_t>(blocks));
    std::vector<float> qs(static_cast<size_t>(blocks));
    for (int64_t r = r_begin; r < r_end; ++r) {
      std::fill(amax.begin(), amax.end(), 0u);
      k.amax_bits_blocks(x.at(r, 0), x.ld, 1, x.cols, amax.data());
      block_multipliers(amax.data(), blocks, f, qs.data(), q.scale_inv.data() + r * blocks, 1);
      for (int64_t c0 = 0; c0 < x.cols; c0 += kPrefetchPiece) {
        const int64_t n = std::min(kPrefetchPiece, x.cols - c0);
        if (r + 1 < r_end) prefetch_range(x.at(r + 1, c0), n * static_cast<int64_t>(x.elem));
        k.scale_encode_blocks(x.at(r, c0), n, qs.data() + c0 / kB, q.codes.data() + r * x.cols + c0, streaming);
      }
    }
    end_streaming(streaming);
  });
}

// 128x128 blocks, a panel of kBlockPanel column blocks at a time: the panel's 128 rows
// (128 x 512 FP32 = 256 KiB) stay in L2 between the amax pass and the encode pass, and each
// row of the panel is read as one contiguous 2 KiB run. (Measured: panels of 4 blocks reach
// 0.53-0.55 of the read bandwidth, 2 blocks 0.53, 8 blocks 0.48-0.52, 16 blocks 0.42-0.44.)
void quantize_blocks_128x128(const Source& x, const SourceKernels& k, ScaleFormat f, QuantizedMatrix& q) {
  const bool streaming = streaming_output(q);
  constexpr int64_t kBlockPanel = 4;
  const int64_t scale_cols = q.scales().cols;
  // 128-row bands in tasks on the kernel pool (bands are independent: same bits).
  kernel_thread_pool().parallel_for((x.rows + kB - 1) / kB, [&](int64_t rb) {
    std::vector<uint32_t> amax(static_cast<size_t>(kBlockPanel));
    std::vector<float> qs(static_cast<size_t>(kBlockPanel));
    const int64_t r0 = rb * kB;
    const int64_t m = std::min(kB, x.rows - r0);
    for (int64_t cb0 = 0; cb0 < scale_cols; cb0 += kBlockPanel) {
      const int64_t c0 = cb0 * kB, nb = std::min(kBlockPanel, scale_cols - cb0), n = std::min(nb * kB, x.cols - c0);
      std::fill(amax.begin(), amax.end(), 0u);
      k.amax_bits_blocks(x.at(r0, c0), x.ld, m, n, amax.data());
      block_multipliers(amax.data(), nb, f, qs.data(), q.scale_inv.data() + rb * scale_cols + cb0, 1);
      for (int64_t r = r0; r < r0 + m; ++r)
        k.scale_encode_blocks(x.at(r, c0), n, qs.data(), q.codes.data() + r * x.cols + c0, streaming);
    }
    end_streaming(streaming);
  });
}

void quantize_per_tensor(const Source& x, const SourceKernels& k, ScaleFormat f, QuantizedMatrix& q) {
  const bool streaming = streaming_output(q);
  const int64_t blocks = (x.cols + kB - 1) / kB;
  std::vector<uint32_t> amax(static_cast<size_t>(blocks), 0u);
  k.amax_bits_blocks(x.at(0, 0), x.ld, x.rows, x.cols, amax.data());
  uint32_t all = 0;
  for (uint32_t a : amax) all = std::max(all, a);
  float qs = 0.0f;
  block_multipliers(&all, 1, f, &qs, q.scale_inv.data(), 1);
  const std::vector<float> qs_blocks(static_cast<size_t>(blocks), qs);
  for (int64_t r = 0; r < x.rows; ++r)
    k.scale_encode_blocks(x.at(r, 0), x.cols, qs_blocks.data(), q.codes.data() + r * x.cols, streaming);
  end_streaming(streaming);
}

// dst[c * dst_ld + r] = src[r * src_ld + c] for one 16x16 byte block, in four rounds of SSE2
// unpacks (8-, 16-, 32-, then 64-bit units of ever more rows).
void transpose16x16_bytes(const uint8_t* src, int64_t src_ld, uint8_t* dst, int64_t dst_ld) {
  __m128i a[16], b[16];
  for (int i = 0; i < 16; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * src_ld));
  for (int p = 0; p < 8; ++p) {  // b[8h + p]: rows 2p, 2p+1, columns 8h..8h+7
    b[p] = _mm_unpacklo_epi8(a[2 * p], a[2 * p + 1]);
    b[8 + p] = _mm_unpackhi_epi8(a[2 * p], a[2 * p + 1]);
  }
  for (int h = 0; h < 2; ++h)
    for (int q = 0; q < 4; ++q) {  // a[4g + q]: rows 4q..4q+3, columns 4g..4g+3
      a[8 * h + q] = _mm_unpacklo_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
      a[8 * h + 4 + q] = _mm_unpackhi_epi16(b[8 * h + 2 * q], b[8 * h + 2 * q + 1]);
    }
  for (int g = 0; g < 4; ++g)
    for (int w = 0; w < 2; ++w) {  // b[2e + w]: rows 8w..8w+7, columns 2e, 2e+1
      b[4 * g + w] = _mm_unpacklo_epi32(a[4 * g + 2 * w], a[4 * g + 2 * w + 1]);
      b[4 * g + 2 + w] = _mm_unpackhi_epi32(a[4 * g + 2 * w], a[4 * g + 2 * w + 1]);
    }
  for (int e = 0; e < 8; ++e) {  // column 2e and 2e+1, all 16 rows
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + 2 * e * dst_ld), _mm_unpacklo_epi64(b[2 * e], b[2 * e + 1]));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + (2 * e + 1) * dst_ld), _mm_unpackhi_epi64(b[2 * e], b[2 * e + 1]));
  }
}

// dst = transpose(src) for a [rows, cols] byte matrix with row strides src_ld and dst_ld: 16x16
// blocks, the edges byte by byte.
void transpose_bytes(const uint8_t* src, int64_t src_ld, int64_t rows, int64_t cols, uint8_t* dst, int64_t dst_ld) {
  const int64_t rows16 = rows / 16 * 16, cols16 = cols / 16 * 16;
  for (int64_t c = 0; c < cols16; c += 16)  // the destination's rows written one after another
    for (int64_t r = 0; r < rows16; r += 16) transpose16x16_bytes(src + r * src_ld + c, src_ld, dst + c * dst_ld + r, dst_ld);
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = c < cols16 ? rows16 : 0; r < rows; ++r) dst[c * dst_ld + r] = src[r * src_ld + c];
}

// 128x1 blocks along rows, the row-major kCols128x1 layout: codes [rows, cols], scales
// [ceil(rows/128), cols].
void quantize_cols_128x1(const Source& x, const SourceKernels& k, ScaleFormat f, QuantizedMatrix& q) {
  const int64_t row_blocks = (x.rows + kB - 1) / kB;
  // 128-row bands in tasks on the kernel pool (bands write disjoint codes and scales: same bits).
  kernel_thread_pool().parallel_for(row_blocks, [&](int64_t rb) {
    std::vector<uint32_t> amax(static_cast<size_t>(kColPanel));
    std::vector<float> qs(static_cast<size_t>(kColPanel));
    const int64_t r0 = rb * kB;
    const int64_t m = std::min(kB, x.rows - r0);
    for (int64_t c0 = 0; c0 < x.cols; c0 += kColPanel) {
      const int64_t n = std::min(kColPanel, x.cols - c0);
      std::fill(amax.begin(), amax.end(), 0u);
      for (int64_t r = r0; r < r0 + m; ++r) k.amax_bits_accumulate(x.at(r, c0), n, amax.data());
      block_multipliers(amax.data(), n, f, qs.data(), q.scale_inv.data() + rb * x.cols + c0, 1);
      for (int64_t r = r0; r < r0 + m; ++r) k.scale_encode_each(x.at(r, c0), n, qs.data(), q.codes.data() + r * x.cols + c0);
    }
  });
}

// A 1x128 tensor and its column-wise copy (the transposed 128x1 quantization) together, with
// the same bytes and scales as quantize_rows_1x128 then quantize_cols_128x1, one 128 x 128 block
// at a time: the block is read once from memory for both kinds of amax, then once from L2 to
// encode both copies; the column-wise codes go to a 16 KiB tile in L1 and are transposed from
// there, each destination column's 128 bytes (two whole lines) written in one go.
void quantize_rows_and_cols(const Source& x, const SourceKernels& k, ScaleFormat f, QuantizedMatrix& q,
                            QuantizedMatrix& t) {
  const int64_t row_blocks = (x.rows + kB - 1) / kB, blocks = q.scales().cols;
  kernel_thread_pool().parallel_for(row_blocks, [&](int64_t rb) {
    std::array<uint32_t, kB> col_amax, row_amax;
    std::array<float, kB> col_qs, row_qs;
    alignas(64) std::array<uint8_t, kB * kB> tile;
    const int64_t r0 = rb * kB, m = std::min(kB, x.rows - r0);
    for (int64_t c0 = 0, cb = 0; c0 < x.cols; c0 += kB, ++cb) {
      const int64_t n = std::min(kB, x.cols - c0);
      col_amax.fill(0u);
      row_amax.fill(0u);
      k.amax_bits_rows_and_cols(x.at(r0, c0), x.ld, m, n, col_amax.data(), row_amax.data(), 1);
      block_multipliers(col_amax.data(), n, f, col_qs.data(), t.scale_inv.data() + c0 * row_blocks + rb, row_blocks);
      block_multipliers(row_amax.data(), m, f, row_qs.data(), q.scale_inv.data() + r0 * blocks + cb, blocks);
      for (int64_t i = 0; i < m; ++i)
        k.scale_encode_blocks_and_each(x.at(r0 + i, c0), n, &row_qs[static_cast<size_t>(i)],
                                       q.codes.data() + (r0 + i) * x.cols + c0, col_qs.data(), tile.data() + i * kB);
      transpose_bytes(tile.data(), kB, m, n, t.codes.data() + c0 * x.rows + r0, x.rows);
    }
  });
}

void transpose_scales(const QuantizedMatrix& from, QuantizedMatrix& to) {
  const ScaleShape s = from.scales();
  for (int64_t i = 0; i < s.rows; ++i)
    for (int64_t j = 0; j < s.cols; ++j)
      to.scale_inv[static_cast<size_t>(j * s.rows + i)] = from.scale_inv[static_cast<size_t>(i * s.cols + j)];
}

}  // namespace

void quantize_into(const TensorView& src, QuantizedTensor& dst, Isa isa) {
  check_matrix_view(src, "quantize source");
  check_matrix_storage(dst.rowwise, "quantize destination");
  FP8RL_CHECK(src.shape[0] == dst.rows() && src.shape[1] == dst.cols(),
              "quantize: source {} does not match the destination's shape [{}, {}]", src.str(), dst.rows(),
              dst.cols());
  FP8RL_CHECK(dst.scale_format == ScaleFormat::kFp32 || dst.scale_format == ScaleFormat::kPow2,
              "quantize: unsupported scale format {}", static_cast<int>(dst.scale_format));
  if (dst.columnwise) {
    check_matrix_storage(*dst.columnwise, "quantize column-wise destination");
    FP8RL_CHECK(dst.columnwise->rows == dst.cols() && dst.columnwise->cols == dst.rows() &&
                    dst.columnwise->mode == columnwise_mode(dst.mode()),
                "quantize: column-wise copy {} is not the transpose layout of {}", dst.columnwise->str(),
                dst.rowwise.str());
  }
  const QuantizeKernels& kernels = kernels_for(isa);
  const SourceKernels& k = src.dtype == DType::kF32 ? kernels.from_f32 : kernels.from_bf16;
  const Source x{static_cast<const std::byte*>(src.data), src.shape[0], src.shape[1], src.strides[0],
                 dtype_size(src.dtype)};
  const ScaleFormat f = dst.scale_format;
  if (dst.mode() == ScalingMode::kRows1x128 && dst.columnwise)
    return quantize_rows_and_cols(x, k, f, dst.rowwise, *dst.columnwise);
  switch (dst.mode()) {
    case ScalingMode::kPerTensor: quantize_per_tensor(x, k, f, dst.rowwise); break;
    case ScalingMode::kRows1x128: quantize_rows_1x128(x, k, f, dst.rowwise); break;
    case ScalingMode::kCols128x1: quantize_cols_128x1(x, k, f, dst.rowwise); break;
    case ScalingMode::kBlocks128x128: quantize_blocks_128x128(x, k, f, dst.rowwise); break;
  }
  if (!dst.columnwise) return;
  // Per-tensor, 128x128 and 128x1 blocks are the same sets of elements after transposition, so
  // the transposed codes and scales are exactly the transposed source's quantization.
  QuantizedMatrix& t = *dst.columnwise;
  transpose_bytes(dst.rowwise.codes.data(), dst.cols(), dst.rows(), dst.cols(), t.codes.data(), dst.rows());
  transpose_scales(dst.rowwise, t);
}

QuantizedTensor quantize(const TensorView& src, ScalingMode mode, ScaleFormat format, bool with_columnwise,
                         Isa isa) {
  FP8RL_CHECK(is_valid_mode(mode), "quantize: unsupported scaling mode {}", static_cast<int>(mode));
  check_matrix_view(src, "quantize source");
  QuantizedTensor q(mode, src.shape[0], src.shape[1], format, with_columnwise);
  quantize_into(src, q, isa);
  return q;
}

void dequantize(const QuantizedMatrix& q, const TensorView& dst, Isa isa) {
  check_matrix_storage(q, "dequantize source");
  check_matrix_view(dst, "dequantize destination");
  FP8RL_CHECK(dst.shape[0] == q.rows && dst.shape[1] == q.cols,
              "dequantize: destination {} does not match the quantized shape [{}, {}]", dst.str(), q.rows, q.cols);
  const QuantizeKernels& kernels = kernels_for(isa);
  const DestKernels& k = dst.dtype == DType::kF32 ? kernels.to_f32 : kernels.to_bf16;
  const int64_t elem = static_cast<int64_t>(dtype_size(dst.dtype));
  auto* out = static_cast<std::byte*>(dst.data);
  const ScaleShape s = q.scales();
  for (int64_t r = 0; r < q.rows; ++r) {
    const uint8_t* codes = q.codes.data() + r * q.cols;
    std::byte* row = out + r * dst.strides[0] * elem;
    switch (q.mode) {
      case ScalingMode::kPerTensor: k.decode_scale(codes, q.cols, q.scale_inv[0], row); break;
      case ScalingMode::kCols128x1:
        k.decode_scale_each(codes, q.cols, q.scale_inv.data() + (r / kB) * s.cols, row);
        break;
      case ScalingMode::kRows1x128:
      case ScalingMode::kBlocks128x128:
        for (int64_t c0 = 0; c0 < q.cols; c0 += kB) {
          k.decode_scale(codes + c0, std::min(kB, q.cols - c0), q.scale_at(r, c0), row + c0 * elem);
        }
        break;
    }
  }
}

}  // namespace fp8rl
