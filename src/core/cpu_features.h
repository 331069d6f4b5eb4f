// CPU feature detection (CPUID + XGETBV), read once per process.
#pragma once

#include <string>
#include <vector>

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
  bool amx_tile = false;
  bool amx_bf16 = false;
  bool os_saves_ymm = false;    // XCR0 has the SSE / AVX (YMM) state bits
  bool os_saves_zmm = false;    // XCR0 has the opmask / ZMM state bits
  bool os_saves_tiles = false;  // XCR0 has the AMX TILECFG / TILEDATA bits
  bool amx_permitted = false;   // Linux granted this process the tile data state (arch_prctl)

  // Everything the AVX2 kernels use: AVX2 and FMA (256-bit FP32 FMAs), with OS support.
  bool has_avx2_kernels() const { return os_saves_ymm && avx2 && fma; }
  // Everything the AVX-512 kernels use: F, BW, VL, DQ, BF16, VBMI, with OS support.
  bool has_avx512_kernels() const {
    return has_avx2_kernels() && os_saves_zmm && avx512f && avx512bw && avx512vl && avx512dq && avx512_bf16 &&
           avx512_vbmi;
  }
  // AMX BF16 tiles usable by this process (on top of the AVX-512 kernels).
  bool has_amx_kernels() const {
    return has_avx512_kernels() && amx_tile && amx_bf16 && os_saves_tiles && amx_permitted;
  }
  std::string describe() const;  // e.g. "avx2 fma avx512f ... (avx512 kernels: yes)"
};

const CpuFeatures& cpu_features();

// Which implementation the dispatchers pick. kAuto picks the best the CPU supports, capped by the
// environment variable FP8RL_ISA (portable, avx2, avx512 or amx) when it is set; tests and
// benchmarks pass an explicit level to compare paths.
//   kPortable: plain x86-64 everywhere.
//   kAvx2:     the AVX2 + FMA kernels (256-bit FP32 FMAs; BF16 and E4M3 widened to FP32). Their
//              BF16 and FP8 products are the portable path's bits (each product is exact in FP32,
//              so one FMA per term equals the portable multiply-then-add), their FP32 GEMMs the
//              AVX-512 path's (one FMA per term in both); docs/kernels.md.
//   kAvx512:   the AVX-512 kernels (vdpbf16ps GEMMs).
//   kAmx:      the AVX-512 kernels, except that the BF16 and FP8 GEMMs and the decode GEMV run on
//              AMX tiles. AMX sums a 32-element chunk of K in its own order, so its products differ
//              in the last bits from the other levels; GEMM and GEMV rows still agree with each
//              other bit for bit (docs/kernels.md).
enum class Isa { kAuto, kPortable, kAvx2, kAvx512, kAmx };  // ordered: each level needs the one before

// The levels from kPortable up to resolve_isa(kAuto) (so within FP8RL_ISA's cap), in order: what
// the benchmarks compare.
std::vector<Isa> isa_levels_up_to_auto();

// Resolves kAuto; throws fp8rl::Error if a level is requested that this CPU (or OS) lacks.
Isa resolve_isa(Isa requested);
// Whether a resolved level runs the AVX-512 kernels (kAvx512 and kAmx do).
inline bool uses_avx512(Isa resolved) { return resolved == Isa::kAvx512 || resolved == Isa::kAmx; }
const char* isa_name(Isa isa);
// Parses "auto", "portable", "avx2", "avx512" or "amx"; throws fp8rl::Error naming `what` otherwise.
Isa parse_isa(const std::string& name, const std::string& what);

}  // namespace fp8rl
