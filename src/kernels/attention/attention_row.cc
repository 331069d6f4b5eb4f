// attention_group_kv: the dispatcher and the portable path (attention_row with row loaders).
#include "kernels/attention/attention_row.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "core/isa_dispatch.h"
#include "numerics/bf16.h"
#include "numerics/e4m3.h"
#include "numerics/exp.h"

namespace fp8rl {

void attention_softmax(float* p, int64_t len, float max) {
  float lanes[16] = {};
  for (int64_t j = 0; j < len; ++j) {
    p[j] = exp_f32(p[j] - max);
    lanes[j % 16] += p[j];
  }
  const float inv = 1.0f / attention_tree_sum(lanes);
  for (int64_t j = 0; j < len; ++j) p[j] *= inv;
}

namespace {

// The portable path: the templates of attention_row.h with row loaders (kBf16: attention_row_bf16).
template <bool kBf16>
void queries_kv_portable(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                         int /*num_runs: the loader walks the runs by position*/, int64_t D, int64_t stride,
                         DType element, float score_scale, float value_scale) {
  const int64_t row_bytes = stride * dtype_bytes(element);
  // Position j -> its run, found by walking forward (positions are visited in order); the row
  // is widened or decoded into `buf` unless it is FP32 already.
  auto loader = [&](bool key) {
    return [=, run = 0, first = int64_t{0}](int64_t j, float* buf) mutable -> const float* {
      while (j >= first + runs[run].rows) first += runs[run++].rows;
      while (j < first) first -= runs[--run].rows;
      const auto* row = static_cast<const uint8_t*>(key ? runs[run].k : runs[run].v) + (j - first) * row_bytes;
      switch (element) {
        case DType::kF32: return reinterpret_cast<const float*>(row);
        case DType::kBF16:
          for (int64_t d = 0; d < D; ++d) buf[d] = bf16_to_f32(reinterpret_cast<const bf16_t*>(row)[d]);
          return buf;
        case DType::kE4M3:
          for (int64_t d = 0; d < D; ++d) buf[d] = e4m3_to_f32(row[d]);
          return buf;
        case DType::kI32:
        case DType::kU8: break;  // not KV rows (attention_queries_kv checks)
      }
      return buf;
    };
  };
  std::vector<float> scratch(static_cast<size_t>(2 * D));
  for (int i = 0; i < num_queries; ++i) {
    const AttentionQuery& a = queries[i];
    if constexpr (kBf16) {
      attention_row_bf16(a.out, a.probs, a.q, a.len, D, score_scale, value_scale, loader(/*key=*/true),
                         loader(/*key=*/false), scratch.data());
    } else {
      attention_row(a.out, a.probs, a.q, a.len, D, score_scale, value_scale, loader(/*key=*/true),
                    loader(/*key=*/false), scratch.data());
    }
  }
}

using QueriesKvFn = void (*)(const AttentionQuery* queries, int num_queries, const AttentionRows* runs, int num_runs,
                             int64_t D, int64_t stride, DType element, float score_scale, float value_scale);

// The paths per level, one table per attention precision; AMX has none of its own and runs
// AVX-512's.
constexpr IsaTable<QueriesKvFn> kQueriesKv{.portable = queries_kv_portable<false>,
                                           .avx2 = detail::attention_queries_kv_avx2,
                                           .avx512 = detail::attention_queries_kv_avx512};
constexpr IsaTable<QueriesKvFn> kQueriesKvBf16{.portable = queries_kv_portable<true>,
                                               .avx2 = detail::attention_queries_kv_bf16_avx2,
                                               .avx512 = detail::attention_queries_kv_bf16_avx512};

}  // namespace

void attention_queries_kv(const AttentionQuery* queries, int num_queries, const AttentionRows* runs, int num_runs,
                          int64_t D, int64_t stride, DType element, float score_scale, float value_scale, bool bf16,
                          Isa isa) {
  FP8RL_CHECK(num_queries > 0, "attention_queries_kv: no queries");
  FP8RL_CHECK(element == DType::kF32 || element == DType::kBF16 || element == DType::kE4M3,
              "attention_queries_kv: K/V rows of type {}", dtype_name(element));
  int64_t covered = 0, longest = 0;
  for (int s = 0; s < num_runs; ++s) covered += runs[s].rows;
  for (int i = 0; i < num_queries; ++i) {
    FP8RL_CHECK(queries[i].len > 0, "attention_queries_kv: query {} attends to {} positions", i, queries[i].len);
    longest = std::max(longest, queries[i].len);
  }
  FP8RL_CHECK(covered == longest, "attention_queries_kv: the runs hold {} positions, the longest query attends to {}",
              covered, longest);
  for (int s = 1; s < num_runs; ++s)
    FP8RL_CHECK((runs[s].key_pairs == nullptr) == (runs[0].key_pairs == nullptr),
                "attention_queries_kv: run {} {} transposed key pairs, run 0 {}", s,
                runs[s].key_pairs ? "has" : "has no", runs[0].key_pairs ? "has" : "has none");
  for (int i = 1; i < num_queries; ++i)
    FP8RL_CHECK((queries[i].out == nullptr) == (queries[0].out == nullptr),
                "attention_queries_kv: query {} {} an output, query 0 {}", i, queries[i].out ? "has" : "has no",
                queries[0].out ? "has" : "has none");
  pick(bf16 ? kQueriesKvBf16 : kQueriesKv, isa)(queries, num_queries, runs, num_runs, D, stride, element, score_scale,
                                                value_scale);
}

void attention_group_kv(float* out, int64_t out_stride, float* probs, int64_t probs_stride, const float* q,
                        int64_t q_stride, int64_t heads, const AttentionRows* runs, int num_runs, int64_t len,
                        int64_t D, int64_t stride, DType element, float score_scale, float value_scale, bool bf16,
                        Isa isa) {
  FP8RL_CHECK(heads > 0 && probs_stride >= len, "attention_group_kv: {} heads, probs stride {} for {} positions", heads,
              probs_stride, len);
  constexpr int64_t kMaxHeads = 64;
  FP8RL_CHECK(heads <= kMaxHeads, "attention_group_kv: {} heads in one group (at most {})", heads, kMaxHeads);
  AttentionQuery queries[kMaxHeads];
  for (int64_t h = 0; h < heads; ++h)
    queries[h] = {q + h * q_stride, out + h * out_stride, probs + h * probs_stride, len};
  attention_queries_kv(queries, static_cast<int>(heads), runs, num_runs, D, stride, element, score_scale, value_scale,
                       bf16, isa);
}

}  // namespace fp8rl
