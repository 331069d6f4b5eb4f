// AVX2 back-end of the blocked GEMM. Placeholder: runs the portable back-end until the AVX2
// micro-kernels land.
#include "kernels/gemm_blocked.h"

namespace fp8rl::gemm_detail {

const GemmBackend& gemm_backend_avx2(OperandType type) { return gemm_backend_portable(type); }

}  // namespace fp8rl::gemm_detail
