// Token log-probs: the scalar definition of logprob.h (the portable level and the twin the vector
// levels are tested against) and AVX2 / AVX-512 loops that compute its bits: every lane performs
// the scalar lane's operations in its order, exp_f32 has bit-identical lanes, and the 16-lane
// trees and the double sum over blocks run in scalar code on every level.
#include "kernels/elementwise/logprob.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "core/thread_pool.h"
#include "numerics/exp.h"
#include "numerics/simd_target.h"

FP8RL_AVX512_BEGIN
#include "numerics/avx512_codec_inl.h"  // inside the region by design (see those headers)
#include "numerics/avx512_exp_inl.h"
FP8RL_AVX512_END
FP8RL_AVX2_BEGIN
#include "numerics/avx2_exp_inl.h"
FP8RL_AVX2_END

namespace fp8rl {

namespace {

// The larger of a and b as max_ps(a, b) returns it: b unless a > b (so NaN never wins over b).
inline float lane_max(float a, float b) { return a > b ? a : b; }

float tree_max(float lanes[16]) {
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] = lane_max(lanes[l + width], lanes[l]);
  return lanes[0];
}

float tree_sum(float lanes[16]) {
  for (int width = 8; width >= 1; width /= 2)
    for (int l = 0; l < width; ++l) lanes[l] += lanes[l + width];
  return lanes[0];
}

// ---- portable: the definition ----------------------------------------------------------------

float block_stats_scalar(const float* x, int64_t n, float* sum) {
  float lanes[16];
  std::fill(lanes, lanes + 16, -INFINITY);
  for (int64_t v = 0; v < n; ++v) lanes[v % 16] = lane_max(x[v], lanes[v % 16]);
  const float m = tree_max(lanes);
  std::fill(lanes, lanes + 16, 0.0f);
  for (int64_t v = 0; v < n; ++v) lanes[v % 16] += exp_f32(x[v] - m);
  *sum = tree_sum(lanes);
  return m;
}

void scaled_exp_scalar(float* d, const float* x, int64_t n, float lse, float minus_dlp) {
  for (int64_t j = 0; j < n; ++j) d[j] = minus_dlp * exp_f32(x[j] - lse);
}

// ---- AVX-512 ---------------------------------------------------------------------------------

FP8RL_AVX512_BEGIN

inline __mmask16 mask16(int64_t left) { return static_cast<__mmask16>(avx512::first_bytes_mask(left)); }

float block_stats_avx512(const float* x, int64_t n, float* sum) {
  alignas(64) float lanes[16];
  __m512 mv = _mm512_set1_ps(-INFINITY);
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) mv = _mm512_max_ps(_mm512_loadu_ps(x + v), mv);
  const __mmask16 tail = mask16(n - v);
  if (v < n) mv = _mm512_mask_max_ps(mv, tail, _mm512_maskz_loadu_ps(tail, x + v), mv);
  _mm512_store_ps(lanes, mv);
  const float m = tree_max(lanes);
  const __m512 mb = _mm512_set1_ps(m);
  __m512 acc = _mm512_setzero_ps();
  for (v = 0; v + 16 <= n; v += 16) acc = _mm512_add_ps(acc, avx512::exp16(_mm512_sub_ps(_mm512_loadu_ps(x + v), mb)));
  if (v < n)
    acc = _mm512_mask_add_ps(acc, tail, acc, avx512::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, x + v), mb)));
  _mm512_store_ps(lanes, acc);
  *sum = tree_sum(lanes);
  return m;
}

void scaled_exp_avx512(float* d, const float* x, int64_t n, float lse, float minus_dlp) {
  const __m512 l = _mm512_set1_ps(lse), s = _mm512_set1_ps(minus_dlp);
  int64_t j = 0;
  for (; j + 16 <= n; j += 16)
    _mm512_storeu_ps(d + j, _mm512_mul_ps(s, avx512::exp16(_mm512_sub_ps(_mm512_loadu_ps(x + j), l))));
  if (j < n) {
    const __mmask16 k = mask16(n - j);
    _mm512_mask_storeu_ps(d + j, k, _mm512_mul_ps(s, avx512::exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + j), l))));
  }
}

FP8RL_AVX512_END

// ---- AVX2: lanes 0-7 and 8-15 of the definition in two registers -------------------------------

FP8RL_AVX2_BEGIN

// Loads x[0, n) for n < 8 with the other lanes set to `fill`.
inline __m256 load_partial8(const float* x, int64_t n, float fill) {
  alignas(32) float buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = i < n ? x[i] : fill;
  return _mm256_load_ps(buf);
}

float block_stats_avx2(const float* x, int64_t n, float* sum) {
  alignas(32) float lanes[16];
  __m256 lo = _mm256_set1_ps(-INFINITY), hi = lo;
  int64_t v = 0;
  for (; v + 16 <= n; v += 16) {
    lo = _mm256_max_ps(_mm256_loadu_ps(x + v), lo);
    hi = _mm256_max_ps(_mm256_loadu_ps(x + v + 8), hi);
  }
  if (v < n) {  // lanes past n see -Inf, which max keeps as it was
    lo = _mm256_max_ps(load_partial8(x + v, std::min<int64_t>(8, n - v), -INFINITY), lo);
    if (n - v > 8) hi = _mm256_max_ps(load_partial8(x + v + 8, n - v - 8, -INFINITY), hi);
  }
  _mm256_store_ps(lanes, lo);
  _mm256_store_ps(lanes + 8, hi);
  const float m = tree_max(lanes);
  const __m256 mb = _mm256_set1_ps(m);
  __m256 acc_lo = _mm256_setzero_ps(), acc_hi = acc_lo;
  for (v = 0; v + 16 <= n; v += 16) {
    acc_lo = _mm256_add_ps(acc_lo, avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + v), mb)));
    acc_hi = _mm256_add_ps(acc_hi, avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + v + 8), mb)));
  }
  _mm256_store_ps(lanes, acc_lo);
  _mm256_store_ps(lanes + 8, acc_hi);
  for (; v < n; ++v) lanes[v % 16] += exp_f32(x[v] - m);  // the tail, in scalar: the same bits
  *sum = tree_sum(lanes);
  return m;
}

void scaled_exp_avx2(float* d, const float* x, int64_t n, float lse, float minus_dlp) {
  const __m256 l = _mm256_set1_ps(lse), s = _mm256_set1_ps(minus_dlp);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8)
    _mm256_storeu_ps(d + j, _mm256_mul_ps(s, avx2::exp8(_mm256_sub_ps(_mm256_loadu_ps(x + j), l))));
  scaled_exp_scalar(d + j, x + j, n - j, lse, minus_dlp);
}

FP8RL_AVX2_END

using BlockStatsFn = float (*)(const float*, int64_t, float*);
using ScaledExpFn = void (*)(float*, const float*, int64_t, float, float);

// AMX has no loops of its own and runs AVX-512's.
constexpr IsaTable<BlockStatsFn> kBlockStats{
    .portable = block_stats_scalar, .avx2 = block_stats_avx2, .avx512 = block_stats_avx512};
constexpr IsaTable<ScaledExpFn> kScaledExp{
    .portable = scaled_exp_scalar, .avx2 = scaled_exp_avx2, .avx512 = scaled_exp_avx512};

// Rows per task: about 64k logits each, so that small vocabularies are not split into tiny tasks.
int64_t rows_per_task(int64_t V) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(V, 1)); }

}  // namespace

float lse_from_block_stats(const float* max, const float* sum, int64_t blocks) {
  float m = -INFINITY;
  for (int64_t b = 0; b < blocks; ++b) m = lane_max(max[b], m);
  double total = 0.0;
  for (int64_t b = 0; b < blocks; ++b)
    if (max[b] != -INFINITY) total += static_cast<double>(sum[b]) * static_cast<double>(exp_f32(max[b] - m));
  return m + static_cast<float>(std::log(total));
}

float logsumexp_row(const float* logits, int64_t V, Isa isa) {
  const BlockStatsFn stats = pick(kBlockStats, isa);
  const int64_t blocks = (V + kLseBlock - 1) / kLseBlock;
  constexpr int64_t kStackBlocks = 128;  // vocabularies up to 262,144 without a heap allocation
  float on_stack[2 * kStackBlocks];
  std::vector<float> on_heap(blocks > kStackBlocks ? static_cast<size_t>(2 * blocks) : 0);
  float* max = blocks > kStackBlocks ? on_heap.data() : on_stack;
  float* sum = max + blocks;
  for (int64_t b = 0; b < blocks; ++b)
    max[b] = stats(logits + b * kLseBlock, std::min(kLseBlock, V - b * kLseBlock), &sum[b]);
  return lse_from_block_stats(max, sum, blocks);
}

void lse_block_stats_rows(float* max, float* sum, int64_t stats_ld, const float* logits, int64_t ld, int64_t n,
                          int64_t rows, Isa isa) {
  FP8RL_CHECK(n >= 1 && n <= kLseBlock, "a log-sum-exp block holds 1 to {} logits, got {}", kLseBlock, n);
  const BlockStatsFn stats = pick(kBlockStats, isa);
  parallel_for_ranges(rows, rows_per_task(n), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) max[r * stats_ld] = stats(logits + r * ld, n, &sum[r * stats_ld]);
  });
}

void check_token_ids(const int32_t* targets, int64_t N, int64_t V) {
  for (int64_t n = 0; n < N; ++n)
    FP8RL_CHECK(targets[n] < V, "token id {} at position {} is outside the vocabulary of {}", targets[n], n, V);
}

void token_logprobs_forward(float* logprob, float* lse_out, const float* logits, int64_t ld, const int32_t* targets,
                            int64_t N, int64_t V, Isa isa) {
  check_token_ids(targets, N, V);

  parallel_for_ranges(N, rows_per_task(V), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      const float* row = logits + n * ld;
      if (targets[n] < 0) {
        logprob[n] = 0.0f;
        if (lse_out != nullptr) lse_out[n] = 0.0f;
        continue;
      }
      const float l = logsumexp_row(row, V, isa);
      if (lse_out != nullptr) lse_out[n] = l;
      logprob[n] = row[targets[n]] - l;
    }
  });
}

void token_logprobs_backward(float* dlogits, const float* logits, int64_t ld, int64_t v0, int64_t width,
                             const float* lse, const float* dlogprob, const int32_t* targets, int64_t N, Isa isa) {
  const ScaledExpFn scaled_exp = pick(kScaledExp, isa);
  parallel_for_ranges(N, rows_per_task(width), [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; ++n) {
      float* d = dlogits + n * ld;
      if (targets[n] < 0 || dlogprob[n] == 0.0f) {
        std::fill(d, d + width, 0.0f);
        continue;
      }
      scaled_exp(d, logits + n * ld, width, lse[n], -dlogprob[n]);
      const int64_t j = targets[n] - v0;
      if (j >= 0 && j < width) d[j] += dlogprob[n];
    }
  });
}

void softmax_probs_row(float* out, const float* x, int64_t n, float lse, Isa isa) {
  pick(kScaledExp, isa)(out, x, n, lse, 1.0f);  // 1 * e is e: exp_f32's bits
}

void token_logprobs_backward(float* dlogits, const float* dlogprob, const float* logits, const int32_t* targets,
                             int64_t N, int64_t V) {
  std::vector<float> lp(static_cast<size_t>(N)), lse(static_cast<size_t>(N));
  token_logprobs_forward(lp.data(), lse.data(), logits, V, targets, N, V);
  token_logprobs_backward(dlogits, logits, V, 0, V, lse.data(), dlogprob, targets, N);
}

}  // namespace fp8rl
