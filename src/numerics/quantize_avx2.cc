// AVX2 quantizer kernels. Placeholder: the portable table.
#include "numerics/quantize_kernels.h"

namespace fp8rl::detail {

const QuantizeKernels& quantize_kernels_avx2() { return quantize_kernels_portable(); }

}  // namespace fp8rl::detail
