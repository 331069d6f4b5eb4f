// The one place that encodes how a kernel family's implementations are chosen per ISA level.
//
// A family declares one IsaTable: an implementation (usually a function pointer) for each level
// that has one of its own. A level without one runs the next lower level's, down the order
//   kAmx -> kAvx512 -> kAvx2 -> kPortable,
// so e.g. a family with only portable and AVX-512 code runs AVX-512 on AMX machines and the
// portable code at kAvx2. `portable` is required; it is what kPortable (and every level without
// a kernel of its own below it) runs. A family whose choice is not this plain fallback says so
// where it declares its table.
//
//   constexpr IsaTable<ScaleFn> kScale{.portable = scale_scalar, .avx512 = scale_avx512};
//   pick(kScale, options.isa)(x, n);  // kAmx, kAvx512: scale_avx512; kAvx2, kPortable: scalar
#pragma once

#include "core/cpu_features.h"

namespace fp8rl {

template <typename Fn>
struct IsaTable {
  Fn portable;
  Fn avx2 = nullptr;
  Fn avx512 = nullptr;
  Fn amx = nullptr;

  // The entry a resolved level runs: the first non-null one at or below `level`. (kAuto, which
  // is not a resolved level, gets `portable`; go through pick() to resolve it.)
  constexpr Fn at(Isa level) const {
    if (level == Isa::kAmx && amx) return amx;
    if ((level == Isa::kAmx || level == Isa::kAvx512) && avx512) return avx512;
    if (level != Isa::kAuto && level != Isa::kPortable && avx2) return avx2;
    return portable;
  }
};

// The entry for `isa` after resolve_isa (kAuto: the best level the CPU has, within FP8RL_ISA;
// throws if an explicit level is one the CPU lacks).
template <typename Fn>
Fn pick(const IsaTable<Fn>& table, Isa isa) {
  return table.at(resolve_isa(isa));
}

}  // namespace fp8rl
