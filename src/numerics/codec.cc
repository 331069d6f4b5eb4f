#include "numerics/codec.h"

#include <algorithm>

#include "core/thread_pool.h"
#include "numerics/e4m3.h"

namespace fp8rl {

namespace detail {
const E4m3DecodeTables& e4m3_decode_tables() {
  static const E4m3DecodeTables tables = [] {
    E4m3DecodeTables t{};
    for (int code = 0; code < 128; ++code) {
      const bf16_t h = e4m3_to_bf16(static_cast<uint8_t>(code));
      t.bf16_high[code] = static_cast<uint8_t>(h >> 8);
      t.bf16_low[code] = static_cast<uint8_t>(h & 0xFF);
    }
    return t;
  }();
  return tables;
}
}  // namespace detail

namespace {
// fn(begin, end) over chunks of [0, n) on the kernel pool: for the elementwise passes over
// arrays of megabytes (the trainer's BF16 copies and rounding points); same bits on any thread.
template <typename Fn>
void in_chunks(int64_t n, const Fn& fn) {
  parallel_for_ranges(n, 32768, fn);
}
}  // namespace

void e4m3_encode_f32(const float* in, uint8_t* out, int64_t n, Isa isa) {
  switch (resolve_isa(isa)) {
    case Isa::kAvx512: case Isa::kAmx: return detail::e4m3_encode_f32_avx512(in, out, n);
    case Isa::kAvx2: return detail::e4m3_encode_f32_avx2(in, out, n);
    default: for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e4m3(in[i]);
  }
}

void e4m3_decode_f32(const uint8_t* in, float* out, int64_t n, Isa isa) {
  switch (resolve_isa(isa)) {
    case Isa::kAvx512: case Isa::kAmx: return detail::e4m3_decode_f32_avx512(in, out, n);
    case Isa::kAvx2: return detail::e4m3_decode_f32_avx2(in, out, n);
    default: for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(in[i]);
  }
}

void e4m3_decode_bf16(const uint8_t* in, bf16_t* out, int64_t n, Isa isa) {
  switch (resolve_isa(isa)) {
    case Isa::kAvx512: case Isa::kAmx: return detail::e4m3_decode_bf16_avx512(in, out, n);
    case Isa::kAvx2: return detail::e4m3_decode_bf16_avx2(in, out, n);
    default: for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_bf16(in[i]);
  }
}

void bf16_encode_f32(const float* in, bf16_t* out, int64_t n, Isa isa) {
  const Isa level = resolve_isa(isa);
  in_chunks(n, [&](int64_t begin, int64_t end) {
    switch (level) {
      case Isa::kAvx512: case Isa::kAmx: return detail::bf16_encode_f32_avx512(in + begin, out + begin, end - begin);
      case Isa::kAvx2: return detail::bf16_encode_f32_avx2(in + begin, out + begin, end - begin);
      default: for (int64_t i = begin; i < end; ++i) out[i] = f32_to_bf16(in[i]);
    }
  });
}

void bf16_decode_f32(const bf16_t* in, float* out, int64_t n, Isa isa) {
  switch (resolve_isa(isa)) {
    case Isa::kAvx512: case Isa::kAmx: return detail::bf16_decode_f32_avx512(in, out, n);
    case Isa::kAvx2: return detail::bf16_decode_f32_avx2(in, out, n);
    default: for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
  }
}

void bf16_round_f32(float* x, int64_t n, Isa isa) {
  const Isa level = resolve_isa(isa);
  in_chunks(n, [&](int64_t begin, int64_t end) {
    switch (level) {
      case Isa::kAvx512: case Isa::kAmx: return detail::bf16_round_f32_avx512(x + begin, end - begin);
      case Isa::kAvx2: return detail::bf16_round_f32_avx2(x + begin, end - begin);
      default: for (int64_t i = begin; i < end; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
    }
  });
}

}  // namespace fp8rl
