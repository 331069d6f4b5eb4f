// CPU feature detection (CPUID + XGETBV), read once per process.
#pragma once

#include <string>

namespace fp8rl {

struct CpuFeatures {
  bool avx2 = false;
  bool fma = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512_bf16 = false;
  bool avx512_vbmi = false;
  bool avx512_vnni = false;
  bool amx_bf16 = false;
  bool os_saves_zmm = false;  // XCR0 has the opmask / ZMM state bits

  // Everything the AVX-512 kernels use: F, BW, VL, DQ, BF16, VBMI, with OS support.
  bool has_avx512_kernels() const {
    return os_saves_zmm && avx512f && avx512bw && avx512vl && avx512dq && avx512_bf16 && avx512_vbmi;
  }
  std::string describe() const;  // e.g. "avx2 fma avx512f ... (avx512 kernels: yes)"
};

const CpuFeatures& cpu_features();

// Which implementation the dispatchers pick. kAuto picks the best the CPU supports; tests and
// benchmarks pass an explicit level to compare paths.
enum class Isa { kAuto, kPortable, kAvx512 };

// Resolves kAuto; throws fp8rl::Error if kAvx512 is requested on a CPU without it.
Isa resolve_isa(Isa requested);
const char* isa_name(Isa isa);

}  // namespace fp8rl
