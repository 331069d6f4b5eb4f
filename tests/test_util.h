// Helpers shared by the test files.
#pragma once

#include <vector>

#include "core/cpu_features.h"

namespace fp8rl::testing {

// Every instruction-set path this CPU can run: portable always, AVX-512 where present.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas = {Isa::kPortable};
  if (cpu_features().has_avx512_kernels()) isas.push_back(Isa::kAvx512);
  return isas;
}

}  // namespace fp8rl::testing
