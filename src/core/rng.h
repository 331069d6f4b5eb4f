// Counter-based random numbers: Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011).
//
// A random value is a pure function of (key, counter): the same numbers come out regardless of
// thread count, call order or batch composition. Callers name a stream (e.g. a sequence index)
// and an index within the stream; nothing is stateful except the convenience `RandomStream`.
#pragma once

#include <array>
#include <cstdint>

namespace fp8rl {

using PhiloxBlock = std::array<uint32_t, 4>;

// One Philox4x32-10 block: 4 independent uniform 32-bit words for (key, counter).
constexpr PhiloxBlock philox4x32(uint64_t key, PhiloxBlock counter) {
  constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = static_cast<uint64_t>(kMul0) * counter[0];
    const uint64_t p1 = static_cast<uint64_t>(kMul1) * counter[2];
    counter = {static_cast<uint32_t>(p1 >> 32) ^ counter[1] ^ k0, static_cast<uint32_t>(p1),
               static_cast<uint32_t>(p0 >> 32) ^ counter[3] ^ k1, static_cast<uint32_t>(p0)};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return counter;
}

// Uniform in [0, 1) with 24 random bits, exactly representable in FP32.
constexpr float uniform_from_bits(uint32_t bits) { return static_cast<float>(bits >> 8) * 0x1.0p-24f; }

// The random words of (seed, stream, index): word `index % 4` of block `index / 4`.
constexpr uint32_t random_u32(uint64_t seed, uint64_t stream, uint64_t index) {
  const uint64_t block = index / 4;
  const PhiloxBlock c = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                         static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)};
  return philox4x32(seed, c)[index % 4];
}

constexpr float random_uniform(uint64_t seed, uint64_t stream, uint64_t index) {
  return uniform_from_bits(random_u32(seed, stream, index));
}

// Sequential reader over one stream, for code that consumes numbers one at a time.
class RandomStream {
 public:
  constexpr RandomStream(uint64_t seed, uint64_t stream, uint64_t start = 0)
      : seed_(seed), stream_(stream), index_(start) {}
  constexpr uint32_t next_u32() { return random_u32(seed_, stream_, index_++); }
  constexpr float next_uniform() { return uniform_from_bits(next_u32()); }
  // Uniform in [0, n) (n > 0), by multiply-shift; bias below 2^-32 * n.
  constexpr uint32_t next_below(uint32_t n) {
    return static_cast<uint32_t>((static_cast<uint64_t>(next_u32()) * n) >> 32);
  }
  float next_normal();  // standard normal (Box-Muller; consumes two words)
  constexpr uint64_t position() const { return index_; }

 private:
  uint64_t seed_, stream_, index_;
};

// Fills out[0..n) with uniform values in [lo, hi); element i depends only on (seed, stream, i).
void fill_uniform(float* out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream);
// Fills out[0..n) with normal values (mean, stddev); element i depends only on (seed, stream, i).
void fill_normal(float* out, int64_t n, float mean, float stddev, uint64_t seed, uint64_t stream);

}  // namespace fp8rl
