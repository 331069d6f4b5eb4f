#include "model/linear.h"

#include <vector>

#include "core/check.h"
#include "core/tensor.h"
#include "kernels/elementwise/bias.h"
#include "kernels/gemm/gemm.h"
#include "numerics/codec.h"
#include "numerics/quantize.h"

namespace fp8rl {

namespace {
// Quantizes x [rows, cols] 1x128 (with its column-wise copy if asked) into `q`, reusing q's
// storage when it is large enough (batches of varying length do not reallocate).
void quantize_activation(const float* x, int64_t rows, int64_t cols, ScaleFormat format, bool with_columnwise,
                         QuantizedTensor& q) {
  const TensorView v = TensorView::contiguous(const_cast<float*>(x), DType::kF32, Shape{rows, cols});
  if (q.rowwise.mode != ScalingMode::kRows1x128 || q.columnwise.has_value() != with_columnwise ||
      q.scale_format != format)
    q = QuantizedTensor(ScalingMode::kRows1x128, rows, cols, format, with_columnwise);
  q.reshape(rows, cols);
  quantize_into(v, q);
}

void to_bf16(const float* x, int64_t n, AlignedBuffer<bf16_t>& out) {
  out.resize(static_cast<size_t>(n));  // storage kept while it is large enough (batches of varying length)
  bf16_encode_f32(x, out.data(), n);
}
}  // namespace

Linear::Linear(std::string name, int64_t out_features, int64_t in_features, Precision precision,
               ScaleFormat weight_format, ScaleFormat activation_format, bool round_output_bf16)
    : name_(std::move(name)),
      N_(out_features),
      K_(in_features),
      precision_(precision),
      weight_format_(weight_format),
      activation_format_(activation_format),
      round_output_bf16_(round_output_bf16) {
  if (precision_ == Precision::kBF16) w_bf16_ = AlignedBuffer<bf16_t>(static_cast<size_t>(N_ * K_));
  if (precision_ == Precision::kFP8)
    w_fp8_ = QuantizedTensor(ScalingMode::kBlocks128x128, N_, K_, weight_format_, /*with_columnwise=*/false);
}

void Linear::refresh_weights(const float* master) {
  FP8RL_CHECK(!frozen_, "linear '{}' is frozen: its weights are set once", name_);
  w_master_ = master;
  if (precision_ == Precision::kBF16 && !bf16_on_demand_) bf16_encode_f32(master, w_bf16_.data(), N_ * K_);
  if (precision_ == Precision::kFP8)
    quantize_into(TensorView::contiguous(const_cast<float*>(master), DType::kF32, Shape{N_, K_}), w_fp8_);
}

void Linear::drop_bf16_copy() {
  FP8RL_CHECK(precision_ == Precision::kBF16 && !frozen_, "linear '{}': only a trainable BF16 linear drops its copy",
              name_);
  bf16_on_demand_ = true;
  w_bf16_ = {};
}

const bf16_t* Linear::bf16_rows(int64_t r0, int64_t n, AlignedBuffer<bf16_t>& scratch) const {
  FP8RL_CHECK(precision_ == Precision::kBF16 && r0 >= 0 && n >= 0 && r0 + n <= N_,
              "linear '{}': BF16 rows [{}, {}) of [{}, {}]", name_, r0, r0 + n, N_, K_);
  if (!bf16_on_demand_) return w_bf16_.data() + r0 * K_;
  FP8RL_CHECK(w_master_ != nullptr, "linear '{}': refresh_weights was never called", name_);
  scratch.resize(static_cast<size_t>(n * K_));
  bf16_encode_f32(w_master_ + r0 * K_, scratch.data(), n * K_);
  return scratch.data();
}

Linear Linear::frozen_copy() const {
  FP8RL_CHECK(w_master_ != nullptr || frozen_, "linear '{}': refresh_weights was never called", name_);
  Linear f;
  f.name_ = name_;
  f.N_ = N_, f.K_ = K_;
  f.precision_ = precision_;
  f.weight_format_ = weight_format_;
  f.activation_format_ = activation_format_;
  f.round_output_bf16_ = round_output_bf16_;
  f.frozen_ = true;
  switch (precision_) {
    case Precision::kF32:
      f.w_f32_ = AlignedBuffer<float>(static_cast<size_t>(N_ * K_));
      std::copy(w_master_, w_master_ + N_ * K_, f.w_f32_.data());
      f.w_master_ = f.w_f32_.data();
      break;
    case Precision::kBF16:
      if (bf16_on_demand_) {
        f.w_bf16_ = AlignedBuffer<bf16_t>(static_cast<size_t>(N_ * K_));
        bf16_encode_f32(w_master_, f.w_bf16_.data(), N_ * K_);
      } else {
        f.w_bf16_ = w_bf16_.clone();
      }
      break;
    case Precision::kFP8:
      f.w_fp8_.scale_format = w_fp8_.scale_format;
      f.w_fp8_.rowwise = w_fp8_.rowwise.clone();
      break;
  }
  return f;
}

Linear Linear::frozen(std::string name, int64_t out_features, int64_t in_features, Precision precision,
                      ScaleFormat weight_format, ScaleFormat activation_format, bool round_output_bf16) {
  Linear f(std::move(name), out_features, in_features, Precision::kF32, weight_format, activation_format,
           round_output_bf16);  // kF32: no low-precision storage yet
  f.precision_ = precision;
  f.frozen_ = true;
  switch (precision) {
    case Precision::kF32: f.w_f32_ = AlignedBuffer<float>(static_cast<size_t>(f.N_ * f.K_)); break;
    case Precision::kBF16: f.w_bf16_ = AlignedBuffer<bf16_t>(static_cast<size_t>(f.N_ * f.K_)); break;
    case Precision::kFP8:
      f.w_fp8_ = QuantizedTensor(ScalingMode::kBlocks128x128, f.N_, f.K_, weight_format, /*with_columnwise=*/false);
      break;
  }
  f.w_master_ = f.w_f32_.empty() ? nullptr : f.w_f32_.data();
  return f;
}

void Linear::set_frozen_rows(const float* w, int64_t row0, int64_t rows) {
  FP8RL_CHECK(frozen_, "linear '{}': set_frozen_rows on a trainable linear", name_);
  FP8RL_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= N_, "linear '{}': rows [{}, {}) outside [0, {})", name_, row0,
              row0 + rows, N_);
  switch (precision_) {
    case Precision::kF32: std::copy(w, w + rows * K_, w_f32_.data() + row0 * K_); break;
    case Precision::kBF16: bf16_encode_f32(w, w_bf16_.data() + row0 * K_, rows * K_); break;
    case Precision::kFP8: {
      FP8RL_CHECK(row0 % kQuantBlock == 0 && (rows % kQuantBlock == 0 || row0 + rows == N_),
                  "linear '{}': FP8 rows [{}, {}) do not cover whole 128-row blocks", name_, row0, row0 + rows);
      if (rows == 0) return;
      QuantizedTensor band(ScalingMode::kBlocks128x128, rows, K_, weight_format_, /*with_columnwise=*/false);
      quantize_into(TensorView::contiguous(const_cast<float*>(w), DType::kF32, Shape{rows, K_}), band);
      QuantizedMatrix& dst = w_fp8_.rowwise;
      std::copy(band.rowwise.codes.begin(), band.rowwise.codes.end(), dst.codes.data() + row0 * K_);
      const int64_t scale_cols = dst.scales().cols;
      std::copy(band.rowwise.scale_inv.begin(), band.rowwise.scale_inv.end(),
                dst.scale_inv.data() + row0 / kQuantBlock * scale_cols);
      break;
    }
  }
}

void Linear::set_frozen_rows_bf16(const bf16_t* w, int64_t row0, int64_t rows) {
  if (precision_ == Precision::kBF16) {
    FP8RL_CHECK(frozen_ && row0 >= 0 && rows >= 0 && row0 + rows <= N_,
                "linear '{}': set_frozen_rows_bf16 rows [{}, {}) on a {} linear of {} rows", name_, row0, row0 + rows,
                frozen_ ? "frozen" : "trainable", N_);
    std::copy(w, w + rows * K_, w_bf16_.data() + row0 * K_);
    return;
  }
  std::vector<float> f(static_cast<size_t>(rows * K_));
  for (size_t i = 0; i < f.size(); ++i) f[i] = bf16_to_f32(w[i]);
  set_frozen_rows(f.data(), row0, rows);
}

void Linear::install_fp8_weights(const QuantizedMatrix& w) {
  FP8RL_CHECK(precision_ == Precision::kFP8, "linear '{}': FP8 weights given to a {} layer", name_,
              precision_name(precision_));
  FP8RL_CHECK(w.mode == ScalingMode::kBlocks128x128 && w.rows == N_ && w.cols == K_,
              "linear '{}': FP8 weights are {}, expected kBlocks128x128 [{}, {}]", name_, w.str(), N_, K_);
  QuantizedMatrix& row = w_fp8_.rowwise;
  std::copy(w.codes.data(), w.codes.data() + N_ * K_, row.codes.data());
  std::copy(w.scale_inv.data(), w.scale_inv.data() + w.scales().numel(), row.scale_inv.data());
}

void Linear::forward(float* y, const float* x, int64_t M, LinearCache& cache, bool save_for_backward,
                     const LinearCache* same_x) const {
  FP8RL_CHECK(w_master_ != nullptr || frozen_, "linear '{}': refresh_weights was never called", name_);
  FP8RL_CHECK(!(frozen_ && save_for_backward), "linear '{}' is frozen: no forward for a backward", name_);
  cache.shared = same_x;
  const LinearCache& in = cache.input();
  GemmOptions gemm;
  gemm.round_output_bf16 = round_output_bf16_ && bias_ == nullptr;  // y rounded tile by tile in the GEMM
  switch (precision_) {
    case Precision::kF32:
      cache.x = x;
      gemm_nt_f32(M, N_, K_, x, K_, w_master_, K_, y, N_, /*accumulate=*/false, gemm);
      break;
    case Precision::kBF16:
      FP8RL_CHECK(!bf16_on_demand_, "linear '{}' keeps no BF16 copy (drop_bf16_copy): read it by bf16_rows", name_);
      if (same_x == nullptr) to_bf16(x, M * K_, cache.x_bf16);
      FP8RL_CHECK(in.x_bf16.size() == static_cast<size_t>(M * K_), "linear '{}': shared input is not [{}, {}] BF16",
                  name_, M, K_);
      gemm_nt_bf16(M, N_, K_, in.x_bf16.data(), K_, w_bf16_.data(), K_, y, N_, /*accumulate=*/false, gemm);
      break;
    case Precision::kFP8:
      if (same_x == nullptr) quantize_activation(x, M, K_, activation_format_, save_for_backward, cache.x_fp8);
      FP8RL_CHECK(in.x_fp8.rows() == M && in.x_fp8.cols() == K_ &&
                      in.x_fp8.columnwise.has_value() == save_for_backward,
                  "linear '{}': shared input is not [{}, {}] FP8 as this forward needs it", name_, M, K_);
      gemm_nt_fp8(in.x_fp8.rowwise, w_fp8_.rowwise, y, N_, /*accumulate=*/false, gemm);
      break;
  }
  if (bias_ != nullptr) bias_forward(y, bias_, M, N_, round_output_bf16_);
}

void Linear::backward(float* dx, bool accumulate_dx, float* dw, const float* dy, int64_t M, const LinearCache& cache,
                      bool accumulate_dw, float* db) const {
  FP8RL_CHECK(!frozen_, "linear '{}' is frozen: it has no backward", name_);
  FP8RL_CHECK((db != nullptr) == (bias_ != nullptr), "linear '{}': a bias gradient {} a bias", name_,
              db != nullptr ? "without" : "is missing for");
  if (db != nullptr) bias_backward(db, dy, M, N_);
  const LinearCache& in = cache.input();
  switch (precision_) {
    case Precision::kF32:
      gemm_nn_f32(M, K_, N_, dy, N_, w_master_, K_, dx, K_, accumulate_dx);
      if (dw != nullptr) gemm_tn_f32(N_, K_, M, dy, N_, cache.x, K_, dw, K_, accumulate_dw);
      break;
    case Precision::kBF16: {
      // Per-thread scratch, kept across calls (shapes repeat every step): no allocation and no
      // zeroing of megabytes per backward.
      FP8RL_CHECK(!bf16_on_demand_, "linear '{}' keeps no BF16 copy (drop_bf16_copy): read it by bf16_rows", name_);
      thread_local AlignedBuffer<bf16_t> dy_bf16;
      to_bf16(dy, M * N_, dy_bf16);
      gemm_nn_bf16(M, K_, N_, dy_bf16.data(), N_, w_bf16_.data(), K_, dx, K_, accumulate_dx);
      if (dw != nullptr) gemm_tn_bf16(N_, K_, M, dy_bf16.data(), N_, in.x_bf16.data(), K_, dw, K_, accumulate_dw);
      break;
    }
    case Precision::kFP8: {
      FP8RL_CHECK(in.x_fp8.columnwise.has_value(),
                  "linear '{}': backward after a forward that did not save for backward", name_);
      thread_local QuantizedTensor dy_q;  // per-thread scratch, reused when the shape repeats
      quantize_activation(dy, M, N_, activation_format_, /*with_columnwise=*/dw != nullptr, dy_q);
      gemm_nn_fp8(dy_q.rowwise, w_fp8_.rowwise, dx, K_, accumulate_dx);  // W as stored: no column-wise copy
      if (dw != nullptr) gemm_nt_fp8(*dy_q.columnwise, *in.x_fp8.columnwise, dw, K_, accumulate_dw);
      break;
    }
  }
}

}  // namespace fp8rl
