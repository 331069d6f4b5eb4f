// AVX2 attention rows. Placeholder: runs the portable path.
#include "kernels/attention_row.h"

namespace fp8rl::detail {

void attention_queries_kv_avx2(const AttentionQuery* queries, int num_queries, const AttentionRows* runs,
                               int num_runs, int64_t D, int64_t stride, KvElement element, float score_scale,
                               float value_scale) {
  attention_queries_kv_portable(queries, num_queries, runs, num_runs, D, stride, element, score_scale, value_scale);
}

}  // namespace fp8rl::detail
