// `fp8rl bench numerics`: codec and quantizer throughput against the streaming read bandwidth.
//
// Every case streams an input of `options.mib` MiB of FP32 (or the FP8 codes made from it) once
// per run; the figure `gbps` counts the input bytes read per second, `gbps_moved` the bytes read
// plus written. Cases that read more than they write (encode, quantize) are compared with the
// read bandwidth measured in the same run, on their input bytes; cases that write more than they
// read (decode, dequantize) with the write bandwidth, on their output bytes. The `_l2` case
// repeats the decode on a 256 KiB slice that stays in L2, where the codec's own speed shows.
#include <fmt/format.h>

#include <string_view>
#include <vector>

#include "bench/bench_suites.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/thread_pool.h"
#include "numerics/codec.h"
#include "numerics/quantize.h"

namespace fp8rl::bench {
namespace {

struct Case {
  const char* name;
  double bytes_in;
  double bytes_out;
  bool write_bound;  // compared with the write bandwidth on bytes_out (else read, bytes_in)
  std::function<void(Isa)> run;
};

}  // namespace

void run_numerics_bench(const BenchOptions& options) {
  const int64_t cols = 8192;
  const int64_t rows = std::max<int64_t>(1, options.mib * (1 << 20) / 4 / cols);
  const int64_t n = rows * cols;
  if (!options.json) {
    fmt::print("# numerics bench: FP32 input [{}, {}] = {} MiB, one thread, median of {} runs; CPU: {}\n", rows, cols,
               n * 4 >> 20, options.repeats, cpu_features().describe());
  }

  Tensor x(DType::kF32, Shape{rows, cols});
  fill_uniform(x.data<float>(), n, -4.0f, 4.0f, /*seed=*/1, /*stream=*/0);
  std::vector<uint8_t> codes(static_cast<size_t>(n));
  std::vector<bf16_t> halves(static_cast<size_t>(n));
  Tensor y(DType::kF32, Shape{rows, cols});
  QuantizedTensor q_rows(ScalingMode::kRows1x128, rows, cols, ScaleFormat::kFp32, /*with_columnwise=*/false);
  QuantizedTensor q_blocks(ScalingMode::kBlocks128x128, rows, cols, ScaleFormat::kFp32, /*with_columnwise=*/false);
  // The training step's activations and gradients: 1x128 rows and the column-wise copy together.
  QuantizedTensor q_both(ScalingMode::kRows1x128, rows, cols, ScaleFormat::kFp32, /*with_columnwise=*/true);
  quantize_into(x.view(), q_blocks);
  e4m3_encode_f32(x.data<float>(), codes.data(), n);

  const double read_limit = measure_read_bandwidth_gbps(n * 4, options.repeats);
  const double write_limit = measure_write_bandwidth_gbps(n * 4, options.repeats);
  emit({{"suite", "numerics"}, {"case", "read_bandwidth"}, {"threads", 1}, {"gbps", read_limit}, {"bytes", n * 4}},
       options);
  emit({{"suite", "numerics"}, {"case", "write_bandwidth"}, {"threads", 1}, {"gbps", write_limit}, {"bytes", n * 4}},
       options);
  const int64_t l2_codes = std::min<int64_t>(n, 256 << 10);
  const int64_t l2_repeats = std::max<int64_t>(1, n / l2_codes);

  const double f32_bytes = static_cast<double>(n) * 4, code_bytes = static_cast<double>(n);
  const std::vector<Case> cases = {
      {"e4m3_decode_bf16", code_bytes, code_bytes * 2, true,
       [&](Isa isa) { e4m3_decode_bf16(codes.data(), halves.data(), n, isa); }},
      {"e4m3_decode_bf16_l2", code_bytes, code_bytes * 2, false,
       [&](Isa isa) {
         for (int64_t r = 0; r < l2_repeats; ++r) e4m3_decode_bf16(codes.data(), halves.data(), l2_codes, isa);
       }},
      {"e4m3_encode", f32_bytes, code_bytes, false,
       [&](Isa isa) { e4m3_encode_f32(x.data<float>(), codes.data(), n, isa); }},
      {"quantize_rows_1x128", f32_bytes, code_bytes, false, [&](Isa isa) { quantize_into(x.view(), q_rows, isa); }},
      {"quantize_rows_1x128_and_columnwise", f32_bytes, code_bytes * 2, false,
       [&](Isa isa) { quantize_into(x.view(), q_both, isa); }},
      {"quantize_blocks_128x128", f32_bytes, code_bytes, false,
       [&](Isa isa) { quantize_into(x.view(), q_blocks, isa); }},
      {"dequantize_blocks_128x128", code_bytes, f32_bytes, true,
       [&](Isa isa) { dequantize(q_blocks.rowwise, y.view(), isa); }},
  };
  std::vector<Isa> isas = isa_levels_up_to_auto();
  std::erase(isas, Isa::kAmx);  // the codecs and quantizers run the AVX-512 code there

  for (const Case& c : cases) {
    double portable_seconds = 0.0;
    for (Isa isa : isas) {
      // One thread, as the record says: kernels called from inside a pool task run inline.
      const double seconds =
          time_median([&] { kernel_thread_pool().parallel_for(1, [&](int64_t) { c.run(isa); }); }, options.repeats);
      if (isa == Isa::kPortable) portable_seconds = seconds;
      const double gbps = c.bytes_in / seconds / 1e9;
      nlohmann::ordered_json r = {{"suite", "numerics"},
                                  {"case", c.name},
                                  {"isa", isa_name(isa)},
                                  {"threads", 1},
                                  {"seconds", seconds},
                                  {"gbps", gbps},
                                  {"gbps_moved", (c.bytes_in + c.bytes_out) / seconds / 1e9}};
      if (std::string_view(c.name).ends_with("_l2")) {
        r["limit"] = "none (L2-resident; the codec's own speed)";
      } else if (c.write_bound) {
        r["limit"] = "write_bandwidth (output bytes)";
        r["limit_gbps"] = write_limit;
        r["ratio_to_limit"] = c.bytes_out / seconds / 1e9 / write_limit;
      } else {
        r["limit"] = "read_bandwidth (input bytes)";
        r["limit_gbps"] = read_limit;
        r["ratio_to_limit"] = gbps / read_limit;
      }
      if (isa != Isa::kPortable) r["speedup_vs_portable"] = portable_seconds / seconds;
      emit(r, options);
    }
  }
}

}  // namespace fp8rl::bench
