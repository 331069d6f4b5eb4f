// One linear layer y = x W^T (+ b) in its precision, forward next to backward.
//
// W [N out, K in] is an FP32 master owned by the parameter buffer. `refresh_weights` makes the
// step's low-precision copy once (BF16, or FP8 in 128x128 blocks, which dgrad reads as stored);
// those are the bytes the refit hands to the generator. The GEMMs (docs/recipe.md sections 3-4):
//   FP32  fprop y = x W^T, dgrad dx = dy W, wgrad dW += dy^T x, all FP32
//   BF16  the same with x, dy and W rounded to BF16, FP32 accumulation
//   FP8   fprop: x 1x128 . W 128x128; dgrad: dy 1x128 . W (the same codes, read along columns);
//         wgrad: dy and x quantized 128x1 along tokens, afresh from high precision
// With BF16 activations the output y is rounded to BF16 (unless the layer is told not to). A bias
// (Qwen2's q, k, v; FP32, never quantized) is added before that rounding (kernels/elementwise/bias.h).
#pragma once

#include <cstdint>
#include <string>

#include "core/aligned_buffer.h"
#include "arch/precision.h"
#include "numerics/bf16.h"
#include "numerics/quantized_tensor.h"

namespace fp8rl {

// What one forward call saves for its backward (reused across calls of the same shape).
struct LinearCache {
  const float* x = nullptr;       // [M, K] the FP32-valued input (FP32 path)
  AlignedBuffer<bf16_t> x_bf16;   // [M, K] (BF16 path)
  QuantizedTensor x_fp8;          // [M, K] 1x128 + column-wise [K, M] (FP8 path)
  // Set when the forward used another linear's copies of the same x (see Linear::forward):
  // the copies above are then unused and backward reads that cache's.
  const LinearCache* shared = nullptr;
  const LinearCache& input() const { return shared != nullptr ? *shared : *this; }
};

class Linear {
 public:
  Linear() = default;
  Linear(std::string name, int64_t out_features, int64_t in_features, Precision precision, ScaleFormat weight_format,
         ScaleFormat activation_format, bool round_output_bf16);

  const std::string& name() const { return name_; }
  Precision precision() const { return precision_; }
  int64_t out_features() const { return N_; }
  int64_t in_features() const { return K_; }

  // Makes this step's copy of W from the FP32 master [N, K] (kept by pointer for the FP32 path).
  void refresh_weights(const float* master);
  // The step's FP8 weights (FP8 layers only) and BF16 weights (BF16 layers only).
  const QuantizedTensor& fp8_weights() const { return w_fp8_; }
  // Replaces this step's FP8 weights (FP8 layers only) with `w`, [N, K] in 128x128 blocks:
  // loading an FP8 export installs the bytes it was written from. The next refresh_weights
  // quantizes the master afresh.
  void install_fp8_weights(const QuantizedMatrix& w);
  const AlignedBuffer<bf16_t>& bf16_weights() const { return w_bf16_; }
  // A trainable BF16 linear that keeps no BF16 copy (the trainer's LM head: [V, C], 0.31 GB at a
  // 152k vocabulary, read only in slices by model/lm_head.h): refresh_weights keeps the master's
  // pointer alone, bf16_weights() is empty, forward() and backward() are refused, and bf16_rows
  // encodes the rows a reader asks for: the values the copy would hold.
  void drop_bf16_copy();
  // Rows [r0, r0 + n) of the BF16 weights [N, K]: in the copy, or encoded from the master into
  // `scratch` (resized to n * K).
  const bf16_t* bf16_rows(int64_t r0, int64_t n, AlignedBuffer<bf16_t>& scratch) const;
  // The FP32 weights [N, K] the FP32 path multiplies by (the master, or a frozen copy's own).
  const float* f32_weights() const { return w_master_; }
  // The FP32 bias [N] forward adds, or nullptr: read in place (a master, or a frozen model's own
  // copy), so that it never goes stale. The owner sets it again after moving its storage.
  void set_bias(const float* bias) { bias_ = bias; }
  const float* bias() const { return bias_; }

  // A linear that holds only what forward() reads, in storage of its own: the BF16 copy, the FP8
  // row-wise codes and scales (no column-wise copy), or for an FP32 layer a copy of the FP32
  // weights. It gives forward()'s bits; backward() on it is refused. (The reference policy.)
  Linear frozen_copy() const;
  // A frozen linear of this shape and precision with zeroed weights, for set_frozen_rows or
  // install_fp8_weights to fill (streamed loading: no FP32 master is ever held).
  static Linear frozen(std::string name, int64_t out_features, int64_t in_features, Precision precision,
                       ScaleFormat weight_format, ScaleFormat activation_format, bool round_output_bf16);
  // Sets rows [row0, row0 + rows) of a frozen linear's weights from high-precision rows
  // [rows, K], exactly as refresh_weights would make them from the whole matrix, without keeping
  // `w` (streamed loading). For an FP8 layer row0 and rows are multiples of 128 (rows may end at N):
  // 128x128 blocks are quantized whole. From BF16 rows, a BF16 layer copies them as they are.
  void set_frozen_rows(const float* w, int64_t row0, int64_t rows);
  void set_frozen_rows_bf16(const bf16_t* w, int64_t row0, int64_t rows);
  bool frozen() const { return frozen_; }
  // Calls f(buffer) for each AlignedBuffer of weights this linear owns (a frozen one's: its FP32,
  // BF16 or FP8 copy and scales), whichever are empty (Transformer::offload_weights).
  template <typename F>
  void visit_weight_storage(F&& f) {
    f(w_f32_), f(w_bf16_), f(w_fp8_.rowwise.codes), f(w_fp8_.rowwise.scale_inv);
  }

  // y [M, N] = x [M, K] W^T; saves what backward needs in `cache`. With save_for_backward false
  // (a forward that no backward follows) the FP8 path skips the column-wise copy of x that only
  // wgrad reads; y is the same either way.
  // `same_x`: the cache of a linear that just ran forward on this very x (same M and
  // save_for_backward) and for which can_share_input(*this) holds: its BF16 or FP8 copies of x
  // are used instead of making new ones (q, k and v read one input, gate and up another). It must
  // outlive this linear's backward.
  void forward(float* y, const float* x, int64_t M, LinearCache& cache, bool save_for_backward = true,
               const LinearCache* same_x = nullptr) const;
  // True if the copies this linear makes of its input are the ones `other` makes.
  bool can_share_input(const Linear& other) const {
    return precision_ == other.precision_ && K_ == other.K_ && activation_format_ == other.activation_format_;
  }
  // dx [M, K] (+)= dy W, dw [N, K] (+)= dy^T x. `dy` is FP32 [M, N]. A null `dw` skips the weight
  // gradient (a frozen weight's: policy.freeze_router). Without `accumulate_dw` the product is
  // written to dw: the bits 0 + product would give, since a product summed from +0 is never -0.
  // With a bias, `db` [N] += the column sums of dy in FP32 (bias_backward).
  void backward(float* dx, bool accumulate_dx, float* dw, const float* dy, int64_t M, const LinearCache& cache,
                bool accumulate_dw = true, float* db = nullptr) const;

 private:
  std::string name_;
  int64_t N_ = 0, K_ = 0;
  Precision precision_ = Precision::kF32;
  ScaleFormat weight_format_ = ScaleFormat::kFp32;
  ScaleFormat activation_format_ = ScaleFormat::kFp32;
  bool round_output_bf16_ = false;
  const float* w_master_ = nullptr;  // [N, K]
  const float* bias_ = nullptr;      // [N]
  bool frozen_ = false;
  bool bf16_on_demand_ = false;      // drop_bf16_copy()
  AlignedBuffer<float> w_f32_;       // [N, K] a frozen FP32 layer's own weights
  AlignedBuffer<bf16_t> w_bf16_;     // [N, K]
  QuantizedTensor w_fp8_;            // [N, K] 128x128, row-wise only (dgrad reads it as stored)
};

}  // namespace fp8rl
