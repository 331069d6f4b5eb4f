// Helpers shared by the test files.
#pragma once

#include <cstdlib>
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

// Why the Python oracles cannot run here, or "" when they can: Debian's /usr/bin/python3 with
// `modules` (e.g. "numpy" or "torch, numpy") importable. Tests that need them skip with this
// reason, as the Node.js and Chromium oracles do when those are missing.
inline std::string python_oracle_unavailable(const std::string& modules) {
  const std::string cmd = "/usr/bin/python3 -c 'import " + modules + "' > /dev/null 2>&1";
  if (std::system(cmd.c_str()) == 0) return "";
  return "/usr/bin/python3 cannot import " + modules + " (scripts/setup.sh installs python3-numpy and python3-torch)";
}

}  // namespace fp8rl::testing
