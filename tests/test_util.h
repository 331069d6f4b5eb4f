// Helpers shared by the test files.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/check.h"
#include "core/cpu_features.h"

namespace fp8rl::testing {

// Every instruction-set path this CPU can run: portable always, AVX2, AVX-512, AMX where present.
inline std::vector<Isa> available_isas() {
  std::vector<Isa> isas = {Isa::kPortable};
  if (cpu_features().has_avx2_kernels()) isas.push_back(Isa::kAvx2);
  if (cpu_features().has_avx512_kernels()) isas.push_back(Isa::kAvx512);
  if (cpu_features().has_amx_kernels()) isas.push_back(Isa::kAmx);
  return isas;
}

// The message of the fp8rl::Error that `fn` throws, or "(no error)".
inline std::string error_message(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace fp8rl::testing
