// Marks a region of a translation unit as compiled for the AVX-512 kernel target.
//
// The project's baseline target is plain x86-64. A kernel file includes every header it needs
// first, then opens FP8RL_AVX512_BEGIN: only the functions defined after it may use AVX-512, so
// no inline function shared with portable code is ever emitted with AVX-512 instructions (which
// the linker could otherwise pick for the portable callers). Callers reach these kernels only
// through the dispatchers, after cpu_features() has confirmed the instructions exist.
#pragma once

#include <immintrin.h>

#define FP8RL_AVX512_BEGIN \
  _Pragma("GCC push_options") \
  _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,bmi2\")")
#define FP8RL_AVX512_END _Pragma("GCC pop_options")

// The same for the AVX2 kernels (AVX2 + FMA, 256-bit vectors). Reached only where
// cpu_features().has_avx2_kernels() holds.
#define FP8RL_AVX2_BEGIN \
  _Pragma("GCC push_options") \
  _Pragma("GCC target(\"avx2,fma\")")
#define FP8RL_AVX2_END _Pragma("GCC pop_options")

// The same for the AMX kernels (AVX-512 plus AMX tiles with BF16 dot products). Reached only
// where cpu_features().has_amx_kernels() holds.
#define FP8RL_AMX_BEGIN \
  _Pragma("GCC push_options") \
  _Pragma("GCC target(\"avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,avx512vbmi,avx2,fma,bmi2,amx-tile,amx-bf16\")")
#define FP8RL_AMX_END _Pragma("GCC pop_options")
