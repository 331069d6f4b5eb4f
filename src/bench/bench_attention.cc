// `fp8rl bench kernels`, attention cases: the generator's decode attention row (one GQA group of
// query heads over a paged KV context) on every ISA level, BF16 and E4M3 pages, fp32 and bf16
// attention precision, against the streaming read bandwidth.
//
// The working set is what a decode step of the capacity case reads (bench generate): 8 sequences
// x 8 layers x 4 KV heads of 2048 positions, head dimension 64, 2 query heads per KV head, in
// pages of 16 positions laid out as the KV cache lays them out (all heads of a position
// together, one page after another). That is 128 MiB of BF16 pages or 64 MiB of E4M3, beyond the
// L3 of the development machines, so the rows come from DRAM as they do in the engine.
// Keys and values uniform in [-1, 1). One thread; the figure is KV bytes read per second and key-value positions per second.
#include <fmt/format.h>

#include <functional>
#include <string>
#include <vector>

#include "bench/bench_suites.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/timer.h"
#include "kernels/attention/attention_row.h"
#include "numerics/bf16.h"
#include "numerics/e4m3.h"

namespace fp8rl::bench {

void run_attention_cases(const BenchOptions& options, const std::function<double()>& bandwidth_gbps,
                         const std::vector<Isa>& isas, bool (*wanted)(const std::string&)) {
  constexpr int64_t kContext = 2048, kD = 64, kGroup = 2, kPage = 16;
  constexpr int64_t kHeadContexts = 8 * 8 * 4;  // sequences x layers x KV heads
  constexpr int64_t kKvHeads = 4;               // KV heads side by side in a page row
  const int64_t stride = kKvHeads * kD, pages = kHeadContexts / kKvHeads * (kContext / kPage);
  std::vector<float> q(static_cast<size_t>(kGroup * kD)), out(q.size()), probs(static_cast<size_t>(kGroup * kContext));
  fill_normal(q.data(), static_cast<int64_t>(q.size()), 0.0f, 1.0f, 41, 0);
  for (const DType element : {DType::kBF16, DType::kE4M3}) {
    const int64_t bytes = dtype_bytes(element), page_bytes = kPage * stride * bytes;
    AlignedBuffer<uint8_t> k(static_cast<size_t>(pages * page_bytes)), v(k.size());
    for (int64_t i = 0; i < pages * kPage * stride; ++i) {
      const float x = 2.0f * uniform_from_bits(random_u32(42, 0, static_cast<uint64_t>(i))) - 1.0f;
      const float y = 2.0f * uniform_from_bits(random_u32(42, 1, static_cast<uint64_t>(i))) - 1.0f;
      if (element == DType::kBF16) {
        reinterpret_cast<bf16_t*>(k.data())[i] = f32_to_bf16(x);
        reinterpret_cast<bf16_t*>(v.data())[i] = f32_to_bf16(y);
      } else {
        k.data()[i] = f32_to_e4m3(x);
        v.data()[i] = f32_to_e4m3(y);
      }
    }
    // Head context h: KV head h % 4 of the pages [h / 4 * 128, h / 4 * 128 + 128).
    std::vector<AttentionRows> runs(static_cast<size_t>(kHeadContexts * (kContext / kPage)));
    for (int64_t h = 0; h < kHeadContexts; ++h)
      for (int64_t p = 0; p < kContext / kPage; ++p) {
        const int64_t page = h / kKvHeads * (kContext / kPage) + p,
                      offset = page * page_bytes + h % kKvHeads * kD * bytes;
        runs[static_cast<size_t>(h * (kContext / kPage) + p)] = {k.data() + offset, v.data() + offset, kPage};
      }
    for (const bool bf16 : {false, true})
      for (const Isa isa : isas) {
        const std::string name = fmt::format("attention_decode_{}_kv_{}", element == DType::kBF16 ? "bf16" : "e4m3",
                                             bf16 ? "bf16" : "fp32");
        if (!wanted(fmt::format("{}/ctx{}/{}/1", name, kContext, isa_name(isa)))) continue;
        const double seconds = time_median(
            [&] {
              for (int64_t h = 0; h < kHeadContexts; ++h)
                attention_group_kv(out.data(), kD, probs.data(), kContext, q.data(), kD, kGroup,
                                   runs.data() + h * (kContext / kPage), static_cast<int>(kContext / kPage), kContext,
                                   kD, stride, element, 0.125f, 1.0f, bf16, isa);
            },
            options.repeats);
        const double kv_bytes = static_cast<double>(kHeadContexts * kContext * 2 * kD * bytes);
        const double limit_gbps = bandwidth_gbps();
        emit({{"suite", "kernels"},
              {"case", name},
              {"context", kContext},
              {"head_dim", kD},
              {"query_heads_per_kv_head", kGroup},
              {"isa", isa_name(isa)},
              {"threads", 1},
              {"seconds", seconds},
              {"positions_per_s", static_cast<double>(kHeadContexts * kContext) / seconds},
              {"gbps", kv_bytes / seconds / 1e9},
              {"limit", "read_bandwidth"},
              {"limit_gbps", limit_gbps},
              {"ratio_to_limit", kv_bytes / seconds / 1e9 / limit_gbps}},
             options);
      }
  }
}

}  // namespace fp8rl::bench
