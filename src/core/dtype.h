// The one element-type enum: how a number is stored, everywhere (tensors, KV pages, GEMM and
// GEMV operands, safetensors, exports). What a layer *computes* in is arch/precision.h's
// Precision; kFP8 there means E4M3 codes with blockwise scales, stored as DType::kE4M3.
#pragma once

#include <cstddef>
#include <cstdint>

namespace fp8rl {

enum class DType : uint8_t {
  kF32,   // IEEE binary32
  kBF16,  // bfloat16, stored as uint16_t bit patterns
  kE4M3,  // OCP FP8 E4M3 "FN", stored as uint8_t codes
  kI32,
  kU8,
};

struct DTypeTraits {
  const char* name;  // as printed: "f32", "bf16", "e4m3", "i32", "u8"
  int64_t bytes;     // storage size of one element
};

// Indexed by DType, in its order.
inline constexpr DTypeTraits kDTypeTraits[] = {{"f32", 4}, {"bf16", 2}, {"e4m3", 1}, {"i32", 4}, {"u8", 1}};

constexpr const DTypeTraits& dtype_traits(DType d) { return kDTypeTraits[static_cast<size_t>(d)]; }
constexpr int64_t dtype_bytes(DType d) { return dtype_traits(d).bytes; }
constexpr size_t dtype_size(DType d) { return static_cast<size_t>(dtype_traits(d).bytes); }
constexpr const char* dtype_name(DType d) { return dtype_traits(d).name; }

}  // namespace fp8rl
