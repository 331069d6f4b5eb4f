// AVX2 decode GEMV. Placeholder: runs the portable kernels.
#include "kernels/gemv_kernels.h"

namespace fp8rl::gemv_detail {

void gemv_strips_avx2(const PackedGemvWeights& W, const PackedActivations& x, const GemvDst& dst, int64_t s0,
                      int64_t s1) {
  gemv_strips_portable(W, x, dst, s0, s1);
}

}  // namespace fp8rl::gemv_detail
