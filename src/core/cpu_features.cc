#include "core/cpu_features.h"

#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>

#include "core/check.h"

namespace fp8rl {
namespace {

uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
  const bool osxsave = ecx & (1u << 27);
  f.fma = ecx & (1u << 12);
  if (osxsave) {
    const uint64_t xcr0 = read_xcr0();
    // Bits 1-2: SSE/AVX state; bits 5-7: opmask, upper ZMM0-15, ZMM16-31.
    f.os_saves_ymm = (xcr0 & 0x6) == 0x6;
    f.os_saves_zmm = (xcr0 & 0xE6) == 0xE6;
    // Bits 17-18: AMX TILECFG and TILEDATA.
    f.os_saves_tiles = (xcr0 & 0x60000) == 0x60000;
  }
  if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) {
    f.avx2 = ebx & (1u << 5);
    f.avx512f = ebx & (1u << 16);
    f.avx512dq = ebx & (1u << 17);
    f.avx512bw = ebx & (1u << 30);
    f.avx512vl = ebx & (1u << 31);
    f.avx512_vbmi = ecx & (1u << 1);
    f.avx512_vnni = ecx & (1u << 11);
    f.amx_bf16 = edx & (1u << 22);
    f.amx_tile = edx & (1u << 24);
  }
  if (__get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx)) f.avx512_bf16 = eax & (1u << 5);
  if (f.amx_tile && f.os_saves_tiles) {
    // Linux hands out the 8 KiB tile data state only on request (once per process, for all its
    // threads): ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA.
    constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    f.amx_permitted = syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures features = detect();
  return features;
}

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (on) s += s.empty() ? name : std::string(" ") + name;
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512_bf16, "avx512_bf16");
  add(avx512_vbmi, "avx512_vbmi");
  add(avx512_vnni, "avx512_vnni");
  add(amx_tile, "amx_tile");
  add(amx_bf16, "amx_bf16");
  s += has_amx_kernels()      ? " (kernels: amx)"
       : has_avx512_kernels() ? " (kernels: avx512)"
       : has_avx2_kernels()   ? " (kernels: avx2)"
                              : " (kernels: portable)";
  return s;
}

namespace {

// The best level of this CPU, capped by FP8RL_ISA.
Isa best_isa() {
  const CpuFeatures& f = cpu_features();
  Isa best = f.has_amx_kernels()      ? Isa::kAmx
             : f.has_avx512_kernels() ? Isa::kAvx512
             : f.has_avx2_kernels()   ? Isa::kAvx2
                                      : Isa::kPortable;
  if (const char* env = std::getenv("FP8RL_ISA"); env != nullptr && *env != '\0') {
    const Isa cap = parse_isa(env, "environment variable FP8RL_ISA");
    if (cap != Isa::kAuto && static_cast<int>(cap) < static_cast<int>(best)) best = cap;
  }
  return best;
}

}  // namespace

Isa resolve_isa(Isa requested) {
  static const Isa best = best_isa();
  if (requested == Isa::kAuto) return best;
  FP8RL_CHECK(requested != Isa::kAvx2 || cpu_features().has_avx2_kernels(),
              "AVX2 kernels requested but this CPU lacks them: {}", cpu_features().describe());
  FP8RL_CHECK(requested != Isa::kAvx512 || cpu_features().has_avx512_kernels(),
              "AVX-512 kernels requested but this CPU lacks them: {}", cpu_features().describe());
  FP8RL_CHECK(requested != Isa::kAmx || cpu_features().has_amx_kernels(),
              "AMX kernels requested but this CPU or OS lacks them: {}", cpu_features().describe());
  return requested;
}

std::vector<Isa> isa_levels_up_to_auto() {
  std::vector<Isa> levels;
  for (Isa isa : {Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (static_cast<int>(isa) <= static_cast<int>(resolve_isa(Isa::kAuto))) levels.push_back(isa);
  return levels;
}

Isa parse_isa(const std::string& name, const std::string& what) {
  for (Isa isa : {Isa::kAuto, Isa::kPortable, Isa::kAvx2, Isa::kAvx512, Isa::kAmx})
    if (name == isa_name(isa)) return isa;
  FP8RL_CHECK(false, "{}: unknown instruction set \"{}\"; expected auto, portable, avx2, avx512 or amx", what, name);
  return Isa::kAuto;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kAuto: return "auto";
    case Isa::kPortable: return "portable";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

}  // namespace fp8rl
