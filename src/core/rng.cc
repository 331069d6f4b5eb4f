#include "core/rng.h"

#include <cmath>

#include "core/thread_pool.h"

namespace fp8rl {

namespace {
// Box-Muller on two uniform words; u1 is moved into (0, 1] so log() is finite.
float box_muller(uint32_t a, uint32_t b) {
  const double u1 = (static_cast<double>(a >> 8) + 1.0) * 0x1.0p-24;
  const double u2 = static_cast<double>(b >> 8) * 0x1.0p-24;
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}
}  // namespace

float RandomStream::next_normal() {
  const uint32_t a = next_u32();
  const uint32_t b = next_u32();
  return box_muller(a, b);
}

// Calls fn(i, word) for the words [begin, end) of a stream, one Philox block per 4 words; word i
// equals random_u32(seed, stream, i).
template <typename Fn>
void for_each_word(uint64_t begin, uint64_t end, uint64_t seed, uint64_t stream, Fn fn) {
  for (uint64_t block = begin / 4; block * 4 < end; ++block) {
    const PhiloxBlock words = philox4x32(seed, {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                                                static_cast<uint32_t>(stream), static_cast<uint32_t>(stream >> 32)});
    for (uint64_t j = 0; j < 4; ++j)
      if (block * 4 + j >= begin && block * 4 + j < end) fn(block * 4 + j, words[j]);
  }
}
template <typename Fn>
void for_each_word(uint64_t count, uint64_t seed, uint64_t stream, Fn fn) {
  for_each_word(0, count, seed, stream, fn);
}

void fill_uniform(float* out, int64_t n, float lo, float hi, uint64_t seed, uint64_t stream) {
  const float width = hi - lo;
  for_each_word(static_cast<uint64_t>(n), seed, stream,
                [&](uint64_t i, uint32_t word) { out[i] = lo + width * uniform_from_bits(word); });
}

void fill_normal(float* out, int64_t n, float mean, float stddev, uint64_t seed, uint64_t stream) {
  // Element i uses words 2i and 2i+1, whatever the chunk it falls in: chunks of elements run as
  // tasks of the kernel pool (a real model's initialisation is 600 M Box-Muller draws).
  parallel_for_ranges(n, int64_t{1} << 16, [&](int64_t i0, int64_t i1) {
    uint32_t first = 0;
    for_each_word(2 * static_cast<uint64_t>(i0), 2 * static_cast<uint64_t>(i1), seed, stream,
                  [&](uint64_t w, uint32_t word) {
                    if (w % 2 == 0) {
                      first = word;
                    } else {
                      out[w / 2] = mean + stddev * box_muller(first, word);
                    }
                  });
  });
}

}  // namespace fp8rl
