#include "numerics/codec.h"

#include <algorithm>

#include "core/isa_dispatch.h"
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

// The scalar definitions (e4m3.h, bf16.h): each family's portable entry.
void e4m3_encode_f32_portable(const float* in, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_e4m3(in[i]);
}
void e4m3_decode_f32_portable(const uint8_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_f32(in[i]);
}
void e4m3_decode_bf16_portable(const uint8_t* in, bf16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = e4m3_to_bf16(in[i]);
}
void bf16_encode_f32_portable(const float* in, bf16_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(in[i]);
}
void bf16_decode_f32_portable(const bf16_t* in, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(in[i]);
}
void bf16_round_f32_portable(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

// One table per conversion; AMX has no codec of its own and runs the AVX-512 one.
constexpr IsaTable<void (*)(const float*, uint8_t*, int64_t)> kE4m3EncodeF32{
    .portable = e4m3_encode_f32_portable,
    .avx2 = detail::e4m3_encode_f32_avx2,
    .avx512 = detail::e4m3_encode_f32_avx512};
constexpr IsaTable<void (*)(const uint8_t*, float*, int64_t)> kE4m3DecodeF32{
    .portable = e4m3_decode_f32_portable,
    .avx2 = detail::e4m3_decode_f32_avx2,
    .avx512 = detail::e4m3_decode_f32_avx512};
constexpr IsaTable<void (*)(const uint8_t*, bf16_t*, int64_t)> kE4m3DecodeBf16{
    .portable = e4m3_decode_bf16_portable,
    .avx2 = detail::e4m3_decode_bf16_avx2,
    .avx512 = detail::e4m3_decode_bf16_avx512};
constexpr IsaTable<detail::Bf16EncodeFn> kBf16EncodeF32{.portable = bf16_encode_f32_portable,
                                                        .avx2 = detail::bf16_encode_f32_avx2,
                                                        .avx512 = detail::bf16_encode_f32_avx512};
constexpr IsaTable<void (*)(const bf16_t*, float*, int64_t)> kBf16DecodeF32{
    .portable = bf16_decode_f32_portable,
    .avx2 = detail::bf16_decode_f32_avx2,
    .avx512 = detail::bf16_decode_f32_avx512};
constexpr IsaTable<detail::Bf16RoundFn> kBf16RoundF32{
    .portable = bf16_round_f32_portable,
    .avx2 = detail::bf16_round_f32_avx2,
    .avx512 = detail::bf16_round_f32_avx512};

}  // namespace

namespace detail {
Bf16RoundFn bf16_round_f32_kernel(Isa isa) { return pick(kBf16RoundF32, isa); }
Bf16EncodeFn bf16_encode_f32_kernel(Isa isa) { return pick(kBf16EncodeF32, isa); }
}  // namespace detail

void e4m3_encode_f32(const float* in, uint8_t* out, int64_t n, Isa isa) { pick(kE4m3EncodeF32, isa)(in, out, n); }

void e4m3_decode_f32(const uint8_t* in, float* out, int64_t n, Isa isa) { pick(kE4m3DecodeF32, isa)(in, out, n); }

void e4m3_decode_bf16(const uint8_t* in, bf16_t* out, int64_t n, Isa isa) { pick(kE4m3DecodeBf16, isa)(in, out, n); }

void bf16_encode_f32(const float* in, bf16_t* out, int64_t n, Isa isa) {
  const auto kernel = pick(kBf16EncodeF32, isa);
  in_chunks(n, [&](int64_t begin, int64_t end) { kernel(in + begin, out + begin, end - begin); });
}

void bf16_decode_f32(const bf16_t* in, float* out, int64_t n, Isa isa) { pick(kBf16DecodeF32, isa)(in, out, n); }

void bf16_round_f32(float* x, int64_t n, Isa isa) {
  const auto kernel = pick(kBf16RoundF32, isa);
  in_chunks(n, [&](int64_t begin, int64_t end) { kernel(x + begin, end - begin); });
}

}  // namespace fp8rl
