// attention_row_kv (every ISA, every row element type) against the scalar attention_row template:
// the same bits.
// ctest-file-label: quick
#include "kernels/attention/attention_row.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/rng.h"
#include "numerics/bf16.h"
#include "numerics/e4m3.h"
#include "numerics/simd_target.h"
#include "tests/test_util.h"

namespace fp8rl {
namespace {

FP8RL_AVX512_BEGIN
// One vdpbf16ps on 16 lanes: acc[l] += a[2l+1] b[2l+1] + a[2l] b[2l] as the hardware adds them.
void vdpbf16ps(float acc[16], const bf16_t a[32], const bf16_t b[32]) {
  const __m512 r =
      _mm512_dpbf16_ps(_mm512_loadu_ps(acc), (__m512bh)_mm512_loadu_si512(a), (__m512bh)_mm512_loadu_si512(b));
  _mm512_storeu_ps(acc, r);
}
FP8RL_AVX512_END

// A random BF16 pattern whose exponent field is drawn from [lo, hi] (0: zero or a denormal).
bf16_t random_bf16(uint64_t seed, uint64_t i, uint32_t lo, uint32_t hi) {
  const uint32_t r = random_u32(seed, i, 0);
  const uint32_t exponent = lo + random_u32(seed, i, 1) % (hi - lo + 1);
  return static_cast<bf16_t>((r & 0x8000u) | (exponent << 7) | (r & 0x7Fu));
}

// The template's pair step is the instruction's definition: the CPU's vdpbf16ps gives its bits on
// normal, tiny (denormal products and sums) and denormal operands.
TEST(AttentionRow, Bf16PairStepIsTheCpusDotProductInstruction) {
  if (!cpu_features().has_avx512_kernels()) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  int64_t mismatches = 0, flushed = 0;
  for (uint64_t round = 0; round < 20000; ++round) {
    const bool tiny = round % 2 == 1;  // exponents near the bottom of the range
    bf16_t a[32], b[32];
    float acc[16], want[16];
    for (int i = 0; i < 32; ++i) {
      a[i] = tiny ? random_bf16(21, round * 64 + i, 0, 75) : random_bf16(21, round * 64 + i, 100, 140);
      b[i] = tiny ? random_bf16(22, round * 64 + i, 0, 75) : random_bf16(22, round * 64 + i, 100, 140);
    }
    for (int l = 0; l < 16; ++l) {
      const uint32_t r = random_u32(23, round, static_cast<uint64_t>(l));
      const uint32_t exponent = tiny ? 1 + r % 20 : 90 + r % 50;  // normal accumulators
      acc[l] = r % 7 == 0 ? 0.0f : std::bit_cast<float>((r & 0x80000000u) | (exponent << 23) | (r >> 9 & 0x7FFFFFu));
      want[l] = bf16_pair_step(acc[l], bf16_to_f32(a[2 * l + 1]), bf16_to_f32(b[2 * l + 1]), bf16_to_f32(a[2 * l]),
                               bf16_to_f32(b[2 * l]));
      if (want[l] == 0.0f) ++flushed;
    }
    vdpbf16ps(acc, a, b);
    for (int l = 0; l < 16; ++l) mismatches += std::bit_cast<uint32_t>(acc[l]) != std::bit_cast<uint32_t>(want[l]);
  }
  EXPECT_EQ(mismatches, 0);
  EXPECT_GT(flushed, 1000);  // the tiny rounds reach the flush
}

// Row storage of one element type, and the scalar widening the template's loaders use.
struct TypedRows {
  DType element;
  std::vector<uint8_t> k, v;
  float value(const std::vector<uint8_t>& rows, int64_t i) const {
    switch (element) {
      case DType::kF32: return reinterpret_cast<const float*>(rows.data())[i];
      case DType::kBF16: return bf16_to_f32(reinterpret_cast<const bf16_t*>(rows.data())[i]);
      case DType::kE4M3: return e4m3_to_f32(rows[static_cast<size_t>(i)]);
      default: break;
    }
    return 0.0f;
  }
};

// FP32 rows stored as `element` (BF16-rounded or E4M3-encoded with every code's magnitude range).
std::vector<uint8_t> store_as(DType element, const std::vector<float>& x) {
  const int64_t bytes = dtype_bytes(element);
  std::vector<uint8_t> out(x.size() * static_cast<size_t>(bytes));
  for (size_t i = 0; i < x.size(); ++i) {
    if (element == DType::kF32) std::memcpy(&out[i * 4], &x[i], 4);
    if (element == DType::kBF16) {
      const bf16_t h = f32_to_bf16(x[i]);
      std::memcpy(&out[i * 2], &h, 2);
    }
    if (element == DType::kE4M3) out[i] = f32_to_e4m3(x[i] * 40.0f);  // normals and subnormals
  }
  return out;
}

TEST(AttentionRow, EveryIsaAndElementTypeGivesTheScalarTemplatesBits) {
  struct Case {
    int64_t D, len, stride;
    int split;  // positions in the first run (the rest in runs of 16, like KV pages), or -1 for one run
    float score_scale, value_scale;
  };
  const Case cases[] = {{16, 1, 16, -1, 0.25f, 1.0f},    {32, 7, 128, 3, 0.17f, 1.0f},
                        {40, 33, 40, 32, 0.3f, 0.5f},    {64, 300, 256, 17, 0.125f, 1.0f},
                        {128, 65, 512, 64, 0.09f, 3.0f}, {8, 5, 24, 0, 1.0f, 1.0f},
                        {200, 20, 200, 19, 0.07f, 1.0f}, {64, 2100, 64, 2048, 0.125f, 0.01f}};
  for (const Case& c : cases) {
    std::vector<float> q(static_cast<size_t>(c.D)), k(static_cast<size_t>(c.len * c.stride)), v(k.size());
    fill_normal(q.data(), c.D, 0.0f, 2.0f, 5, 1);
    fill_normal(k.data(), c.len * c.stride, 0.0f, 2.0f, 5, 2);
    fill_normal(v.data(), c.len * c.stride, 0.0f, 1.0f, 5, 3);
    if (c.D >= 16) q[3] = -0.0f, k[3] = 0.0f;  // a signed zero product
    for (DType element : {DType::kF32, DType::kBF16, DType::kE4M3})
      for (const bool bf16 : {false, true}) {  // attention_precision fp32 and bf16
        const TypedRows rows{element, store_as(element, k), store_as(element, v)};
        std::vector<float> want(static_cast<size_t>(c.D)), want_p(static_cast<size_t>(c.len));
        std::vector<float> scratch(static_cast<size_t>(2 * c.D));
        auto loader = [&](const std::vector<uint8_t>& stored) {
          return [&](int64_t j, float* buf) {
            for (int64_t d = 0; d < c.D; ++d) buf[d] = rows.value(stored, j * c.stride + d);
            return static_cast<const float*>(buf);
          };
        };
        if (bf16) {
          attention_row_bf16(want.data(), want_p.data(), q.data(), c.len, c.D, c.score_scale, c.value_scale,
                             loader(rows.k), loader(rows.v), scratch.data());
        } else {
          attention_row(want.data(), want_p.data(), q.data(), c.len, c.D, c.score_scale, c.value_scale, loader(rows.k),
                        loader(rows.v), scratch.data());
        }
        const int64_t row_bytes = c.stride * dtype_bytes(element);
        std::vector<AttentionRows> runs;
        const int64_t first = c.split < 0 ? c.len : c.split;
        if (first > 0) runs.push_back({rows.k.data(), rows.v.data(), first});
        for (int64_t j = first; j < c.len; j += 16)
          runs.push_back(
              {rows.k.data() + j * row_bytes, rows.v.data() + j * row_bytes, std::min<int64_t>(16, c.len - j)});
        for (Isa isa : testing::available_isas()) {
          std::vector<float> got(want.size(), 7.0f), got_p(want_p.size(), 7.0f);
          attention_row_kv(got.data(), got_p.data(), q.data(), runs.data(), static_cast<int>(runs.size()), c.len, c.D,
                           c.stride, element, c.score_scale, c.value_scale, bf16, isa);
          const std::string what = std::string(isa_name(isa)) + " element " +
                                   std::to_string(static_cast<int>(element)) + " D=" + std::to_string(c.D) +
                                   " len=" + std::to_string(c.len) + (bf16 ? " bf16" : "");
          EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << what;
          EXPECT_EQ(0, std::memcmp(got_p.data(), want_p.data(), want_p.size() * 4)) << what;
          // Probabilities only (no output, the value pass skipped): the same P.
          std::vector<float> only_p(want_p.size(), 7.0f);
          attention_row_kv(nullptr, only_p.data(), q.data(), runs.data(), static_cast<int>(runs.size()), c.len, c.D,
                           c.stride, element, c.score_scale, c.value_scale, bf16, isa);
          EXPECT_EQ(0, std::memcmp(only_p.data(), want_p.data(), want_p.size() * 4)) << what << " (probabilities only)";
        }
      }
  }
}

// Operands and sums at the bottom of the exponent range (BF16 denormals, denormal products and
// partial sums, tiny probabilities): every level flushes exactly where the template does.
TEST(AttentionRow, Bf16TinyValuesFlushAsTheTemplate) {
  const int64_t D = 48, len = 37;
  std::vector<float> q(static_cast<size_t>(D)), k(static_cast<size_t>(len * D)), v(k.size());
  for (int64_t i = 0; i < D; ++i)
    q[static_cast<size_t>(i)] = bf16_to_f32(random_bf16(31, static_cast<uint64_t>(i), 60, 70));
  for (int64_t i = 0; i < len * D; ++i) {
    k[static_cast<size_t>(i)] = bf16_to_f32(random_bf16(32, static_cast<uint64_t>(i), 55, 70));
    v[static_cast<size_t>(i)] = bf16_to_f32(random_bf16(33, static_cast<uint64_t>(i), 0, 6));
  }
  k[5 * D] = 1e4f;  // one sharp key: the other probabilities are tiny
  for (DType element : {DType::kF32, DType::kBF16}) {
    const std::vector<uint8_t> kr = store_as(element, k), vr = store_as(element, v);
    const AttentionRows run{kr.data(), vr.data(), len};
    std::vector<float> want(static_cast<size_t>(D)), want_p(static_cast<size_t>(len));
    attention_row_kv(want.data(), want_p.data(), q.data(), &run, 1, len, D, D, element, 1.0f, 1.0f, true,
                     Isa::kPortable);
    EXPECT_TRUE(std::any_of(want.begin(), want.end(), [](float x) { return x != 0.0f; }));
    for (Isa isa : testing::available_isas()) {
      std::vector<float> got(want.size()), got_p(want_p.size());
      attention_row_kv(got.data(), got_p.data(), q.data(), &run, 1, len, D, D, element, 1.0f, 1.0f, true, isa);
      EXPECT_EQ(0, std::memcmp(got.data(), want.data(), want.size() * 4)) << isa_name(isa);
      EXPECT_EQ(0, std::memcmp(got_p.data(), want_p.data(), want_p.size() * 4)) << isa_name(isa);
    }
  }
}

// A GQA group: each of 1..3 heads reading the same rows gets the single-head bits (the AVX-512
// path widens narrow key rows once for all heads and sums values for two heads at a time).
TEST(AttentionRow, GroupOfHeadsGivesEachHeadsSingleRowBits) {
  for (const int64_t D : {64, 8, 200}) {  // one chunk group, a partial chunk, several groups + a partial chunk
    const int64_t len = 53, stride = 208, q_stride = 216, out_stride = 224;
    std::vector<float> k(static_cast<size_t>(len * stride)), v(k.size()), q(3 * q_stride);
    fill_normal(k.data(), len * stride, 0.0f, 2.0f, 9, 1);
    fill_normal(v.data(), len * stride, 0.0f, 1.0f, 9, 2);
    fill_normal(q.data(), 3 * q_stride, 0.0f, 2.0f, 9, 3);
    for (DType element : {DType::kF32, DType::kBF16, DType::kE4M3}) {
      const std::vector<uint8_t> kr = store_as(element, k), vr = store_as(element, v);
      const int64_t row_bytes = stride * dtype_bytes(element);
      const AttentionRows runs[] = {{kr.data(), vr.data(), 20},
                                    {kr.data() + 20 * row_bytes, vr.data() + 20 * row_bytes, len - 20}};
      for (int64_t heads = 1; heads <= 3; ++heads)
        for (const bool bf16 : {false, true})
          for (Isa isa : testing::available_isas()) {
            std::vector<float> out(static_cast<size_t>(heads * out_stride), 7.0f),
                p(static_cast<size_t>(heads * 60), 7.0f);
            attention_group_kv(out.data(), out_stride, p.data(), 60, q.data(), q_stride, heads, runs, 2, len, D, stride,
                               element, 0.125f, 0.5f, bf16, isa);
            for (int64_t h = 0; h < heads; ++h) {
              std::vector<float> want(static_cast<size_t>(D)), want_p(static_cast<size_t>(len));
              attention_row_kv(want.data(), want_p.data(), q.data() + h * q_stride, runs, 2, len, D, stride, element,
                               0.125f, 0.5f, bf16, Isa::kPortable);
              const std::string what = std::string(isa_name(isa)) + " element " +
                                       std::to_string(static_cast<int>(element)) + " D " + std::to_string(D) +
                                       " heads " + std::to_string(heads) + " head " + std::to_string(h) +
                                       (bf16 ? " bf16" : "");
              EXPECT_EQ(0, std::memcmp(out.data() + h * out_stride, want.data(), want.size() * 4)) << what;
              EXPECT_EQ(0, std::memcmp(p.data() + h * 60, want_p.data(), want_p.size() * 4)) << what;
              EXPECT_EQ(out[static_cast<size_t>(h * out_stride + D)], 7.0f) << what << ": wrote past D";
            }
          }
    }
  }
}

// Queries of different lengths over the same rows (the trainer's consecutive causal rows, several
// heads each; more than the four a value pass takes at once): each gets its single-row bits.
TEST(AttentionRow, QueriesOfDifferentLengthsGiveEachQuerysSingleRowBits) {
  for (const int64_t D : {64, 24}) {
    const int64_t rows = 45, stride = 80, queries_n = 11;
    std::vector<float> k(static_cast<size_t>(rows * stride)), v(k.size()), q(static_cast<size_t>(queries_n * D));
    fill_normal(k.data(), rows * stride, 0.0f, 2.0f, 10, 1);
    fill_normal(v.data(), rows * stride, 0.0f, 1.0f, 10, 2);
    fill_normal(q.data(), queries_n * D, 0.0f, 2.0f, 10, 3);
    for (DType element : {DType::kF32, DType::kBF16, DType::kE4M3}) {
      const std::vector<uint8_t> kr = store_as(element, k), vr = store_as(element, v);
      const int64_t row_bytes = stride * dtype_bytes(element);
      const AttentionRows runs[] = {{kr.data(), vr.data(), 17},
                                    {kr.data() + 17 * row_bytes, vr.data() + 17 * row_bytes, rows - 17}};
      for (const bool bf16 : {false, true})
        for (Isa isa : testing::available_isas()) {
          std::vector<float> out(static_cast<size_t>(queries_n * D), 7.0f),
              p(static_cast<size_t>(queries_n * rows), 7.0f);
          std::vector<AttentionQuery> queries;
          for (int64_t i = 0; i < queries_n; ++i)  // lengths 45, 44, ..., 35 (out of order on purpose)
            queries.push_back({q.data() + i * D, out.data() + i * D, p.data() + i * rows, rows - (i * 7) % queries_n});
          attention_queries_kv(queries.data(), static_cast<int>(queries.size()), runs, 2, D, stride, element, 0.125f,
                               0.5f, bf16, isa);
          for (const AttentionQuery& a : queries) {
            std::vector<AttentionRows> own = {runs[0], runs[1]};
            own[1].rows = a.len - 17;
            std::vector<float> want(static_cast<size_t>(D)), want_p(static_cast<size_t>(a.len));
            attention_row_kv(want.data(), want_p.data(), a.q, own.data(), 2, a.len, D, stride, element, 0.125f, 0.5f,
                             bf16, Isa::kPortable);
            const std::string what = std::string(isa_name(isa)) + " element " +
                                     std::to_string(static_cast<int>(element)) + " D " + std::to_string(D) + " len " +
                                     std::to_string(a.len) + (bf16 ? " bf16" : "");
            EXPECT_EQ(0, std::memcmp(a.out, want.data(), want.size() * 4)) << what;
            EXPECT_EQ(0, std::memcmp(a.probs, want_p.data(), want_p.size() * 4)) << what;
            if (a.len < rows) {
              EXPECT_EQ(a.probs[a.len], 7.0f) << what << ": wrote past len";
            }
          }
        }
    }
  }
}

// The trainer's single run with its keys also transposed into pairs (AttentionRows::key_pairs):
// every query still gets its single-row bits, tiny values flushed as the template flushes them.
TEST(AttentionRow, TransposedKeyPairsGiveEachQuerysSingleRowBits) {
  for (const int64_t D : {128, 48, 200}) {
    const int64_t rows = 45, queries_n = 11, num_pairs = (D + 31) / 32 * 16, ld = 48;
    for (const bool tiny : {false, true}) {
      std::vector<float> k(static_cast<size_t>(rows * D)), v(k.size()), q(static_cast<size_t>(queries_n * D));
      fill_normal(k.data(), rows * D, 0.0f, 2.0f, 12, 1);
      fill_normal(v.data(), rows * D, 0.0f, 1.0f, 12, 2);
      fill_normal(q.data(), queries_n * D, 0.0f, 2.0f, 12, 3);
      if (tiny)
        for (size_t i = 0; i < k.size(); ++i) {
          k[i] = bf16_to_f32(random_bf16(34, i, 55, 70));
          if (i < q.size()) q[i] = bf16_to_f32(random_bf16(35, i, 60, 70));
        }
      const std::vector<uint8_t> kr = store_as(DType::kBF16, k), vr = store_as(DType::kBF16, v);
      const auto* words = reinterpret_cast<const bf16_t*>(kr.data());
      std::vector<uint32_t> pairs(static_cast<size_t>(num_pairs * ld), 0u);
      for (int64_t j = 0; j < rows; ++j)
        for (int64_t p = 0; 2 * p < D; ++p) {
          const uint32_t odd = 2 * p + 1 < D ? words[j * D + 2 * p + 1] : 0u;
          pairs[static_cast<size_t>(p * ld + j)] = odd << 16 | words[j * D + 2 * p];
        }
      const AttentionRows run{kr.data(), vr.data(), rows, pairs.data(), ld};
      for (Isa isa : testing::available_isas())
        for (const bool with_out : {true, false}) {  // the forward, the backward's probabilities only
          std::vector<float> out(static_cast<size_t>(queries_n * D), 7.0f),
              p(static_cast<size_t>(queries_n * rows), 7.0f);
          std::vector<AttentionQuery> queries;
          for (int64_t i = 0; i < queries_n; ++i)
            queries.push_back({q.data() + i * D, with_out ? out.data() + i * D : nullptr, p.data() + i * rows,
                               rows - (i * 7) % queries_n});
          attention_queries_kv(queries.data(), static_cast<int>(queries.size()), &run, 1, D, D, DType::kBF16, 0.125f,
                               0.5f, /*bf16=*/true, isa);
          for (const AttentionQuery& a : queries) {
            const AttentionRows own{kr.data(), vr.data(), a.len};
            std::vector<float> want(static_cast<size_t>(D)), want_p(static_cast<size_t>(a.len));
            attention_row_kv(want.data(), want_p.data(), a.q, &own, 1, a.len, D, D, DType::kBF16, 0.125f, 0.5f, true,
                             Isa::kPortable);
            const std::string what = std::string(isa_name(isa)) + " D " + std::to_string(D) + " len " +
                                     std::to_string(a.len) + (tiny ? " tiny" : "") + (with_out ? "" : " probs only");
            if (with_out) {
              EXPECT_EQ(0, std::memcmp(a.out, want.data(), want.size() * 4)) << what;
            }
            EXPECT_EQ(0, std::memcmp(a.probs, want_p.data(), want_p.size() * 4)) << what;
            if (a.len < rows) {
              EXPECT_EQ(a.probs[a.len], 7.0f) << what << ": wrote past len";
            }
          }
        }
    }
  }
}

// The prefix layout's context: several runs of rows taken from one set of rows, each run pointing
// into the same transposed pairs at its first row (odd lengths, so pairs of positions straddle
// runs, and blocks of 16 keys read past a run's end into rows it does not hold).
TEST(AttentionRow, TransposedKeyPairsAcrossRunsGiveEachQuerysSingleRowBits) {
  const int64_t D = 128, pool = 70, num_pairs = D / 2, ld = 96;
  std::vector<float> k(static_cast<size_t>(pool * D)), v(k.size()), q(static_cast<size_t>(9 * D));
  fill_normal(k.data(), pool * D, 0.0f, 2.0f, 13, 1);
  fill_normal(v.data(), pool * D, 0.0f, 1.0f, 13, 2);
  fill_normal(q.data(), 9 * D, 0.0f, 2.0f, 13, 3);
  const std::vector<uint8_t> kr = store_as(DType::kBF16, k), vr = store_as(DType::kBF16, v);
  const auto* words = reinterpret_cast<const bf16_t*>(kr.data());
  std::vector<uint32_t> pairs(static_cast<size_t>(num_pairs * ld), 0u);
  for (int64_t j = 0; j < pool; ++j)
    for (int64_t p = 0; p < num_pairs; ++p)
      pairs[static_cast<size_t>(p * ld + j)] = uint32_t{words[j * D + 2 * p + 1]} << 16 | words[j * D + 2 * p];
  const int64_t spans[][2] = {{5, 17}, {40, 3}, {50, 20}};  // (first row, rows): 40 positions
  std::vector<AttentionRows> with_pairs, plain;
  for (const auto& [first, rows] : spans) {
    plain.push_back({kr.data() + 2 * first * D, vr.data() + 2 * first * D, rows});
    with_pairs.push_back({plain.back().k, plain.back().v, rows, pairs.data() + first, ld});
  }
  for (Isa isa : testing::available_isas())
    for (const bool with_out : {true, false}) {
      std::vector<float> out(static_cast<size_t>(9 * D), 7.0f), p(static_cast<size_t>(9 * 40), 7.0f);
      std::vector<AttentionQuery> queries;
      for (const int64_t len : {40, 39, 17, 18, 20, 21, 1, 33, 40})
        queries.push_back({q.data() + queries.size() * D, with_out ? out.data() + queries.size() * D : nullptr,
                           p.data() + queries.size() * 40, len});
      attention_queries_kv(queries.data(), static_cast<int>(queries.size()), with_pairs.data(), 3, D, D, DType::kBF16,
                           0.125f, 0.5f, /*bf16=*/true, isa);
      for (const AttentionQuery& a : queries) {
        std::vector<float> want(static_cast<size_t>(D)), want_p(static_cast<size_t>(a.len));
        std::vector<AttentionRows> own;  // the spans up to the query's length, the last one cut
        for (int64_t covered = 0; covered < a.len; covered += own.back().rows) {
          own.push_back(plain[own.size()]);
          own.back().rows = std::min(own.back().rows, a.len - covered);
        }
        attention_row_kv(want.data(), want_p.data(), a.q, own.data(), static_cast<int>(own.size()), a.len, D, D,
                         DType::kBF16, 0.125f, 0.5f, true, Isa::kPortable);
        const std::string what =
            std::string(isa_name(isa)) + " len " + std::to_string(a.len) + (with_out ? "" : " probs only");
        if (with_out) {
          EXPECT_EQ(0, std::memcmp(a.out, want.data(), want.size() * 4)) << what;
        }
        EXPECT_EQ(0, std::memcmp(a.probs, want_p.data(), want_p.size() * 4)) << what;
        if (a.len < 40) {
          EXPECT_EQ(a.probs[a.len], 7.0f) << what << ": wrote past len";
        }
      }
    }
  // Key pairs on some runs only is a caller's error.
  with_pairs[1].key_pairs = nullptr;
  std::vector<float> out(static_cast<size_t>(D)), p(40);
  const std::string message = testing::error_message([&] {
    attention_row_kv(out.data(), p.data(), q.data(), with_pairs.data(), 3, 40, D, D, DType::kBF16, 1.0f, 1.0f, true);
  });
  EXPECT_NE(message.find("run 1 has no transposed key pairs, run 0 has"), std::string::npos) << message;
}

// Every E4M3 code (NaN included) reads as its exact value: with one key, p = 1 and the output is
// the value row itself.
TEST(AttentionRow, E4m3RowsDecodeEveryCodeExactly) {
  const std::vector<uint8_t> k(16, 0);
  const std::vector<float> q(16, 1.0f);
  for (int code = 0; code < 256; ++code) {
    std::vector<uint8_t> v(16, 0);
    v[0] = static_cast<uint8_t>(code);
    const AttentionRows one{k.data(), v.data(), 1};
    const float want = 0.0f + e4m3_to_f32(static_cast<uint8_t>(code));  // the output sum starts at +0
    for (const bool bf16 : {false, true})
      for (Isa isa : testing::available_isas()) {
        std::vector<float> out(16), p(1);
        attention_row_kv(out.data(), p.data(), q.data(), &one, 1, 1, 16, 16, DType::kE4M3, 1.0f, 1.0f, bf16, isa);
        if (std::isnan(want))
          EXPECT_TRUE(std::isnan(out[0])) << isa_name(isa) << " code " << code;
        else
          EXPECT_EQ(std::bit_cast<uint32_t>(out[0]), std::bit_cast<uint32_t>(want))
              << isa_name(isa) << " code " << code;
      }
  }
}

TEST(AttentionRow, RunsMustCoverTheRow) {
  std::vector<float> q(16), k(32), v(32), out(16), p(2);
  const AttentionRows one{k.data(), v.data(), 1};
  const std::string message = testing::error_message(
      [&] { attention_row_kv(out.data(), p.data(), q.data(), &one, 1, 2, 16, 16, DType::kF32, 1.0f, 1.0f); });
  EXPECT_NE(message.find("the runs hold 1 positions, the longest query attends to 2"), std::string::npos) << message;
}

}  // namespace
}  // namespace fp8rl
