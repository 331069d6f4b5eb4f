// Small FP32 products unpacked, AVX2 back-end. Placeholder: declines every problem.
#include "kernels/gemm_blocked.h"

namespace fp8rl::gemm_detail {

bool gemm_direct_f32_avx2(const GemmProblem&) { return false; }

}  // namespace fp8rl::gemm_detail
