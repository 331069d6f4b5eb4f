// `fp8rl bench kernels`: GEMM and decode-GEMV throughput against the machine's limits (the
// register-only vdpbf16ps and 256-bit FMA peaks, the streaming read bandwidth) and against
// oneDNN's matmul, measured in the same run; the generator's decode attention row against the
// read bandwidth (bench_attention.cc).
//
// The oneDNN peer runs in child processes of this binary (FP8RL_BENCH_ONEDNN_CHILD set), one per
// (ISA limit, thread count): oneDNN's ISA limit can be set only once per process, before any
// primitive exists, and its OpenMP thread count is fixed by OMP_NUM_THREADS at start-up. The BF16
// peer figure is reported twice: as oneDNN runs by default (on a CPU with AMX it uses the AMX
// tiles) and limited to AVX-512 BF16, the instruction set our AVX-512 kernels use. A third child,
// limited to AVX2, runs oneDNN's FP32 matmul (AVX2 has no BF16 arithmetic; our AVX2 kernels widen
// BF16 and FP8 to FP32), reported beside the avx2 lines. oneDNN is optional (onednn_peer.h): a
// build without it runs every other case and prints one record saying that the peer was skipped.
//
// Environment (the children inherit it), for short runs:
//   FP8RL_BENCH_KERNELS_FILTER  a regular expression; only the GEMM / GEMV / attention cases whose
//                               key "case/shape/isa/threads" (e.g. "gemm_fp8/1024x1024x1024/avx2/1",
//                               "attention_decode_e4m3_kv_bf16/ctx2048/avx512/1") it matches run,
//                               and only the peers those lines need.
//   FP8RL_BENCH_KERNELS_SHAPES  GEMM shapes instead of the default ones, e.g. "2048x256x256,512x2048x512".
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench/bench_suites.h"
#include "bench/onednn_peer.h"
#include "core/aligned_buffer.h"
#include "core/cpu_features.h"
#include "core/rng.h"
#include "core/thread_pool.h"
#include "core/timer.h"
#include "kernels/gemm/gemm.h"
#include "kernels/gemv/gemv.h"
#include "numerics/codec.h"
#include "numerics/quantize.h"
#include "numerics/simd_target.h"

namespace fp8rl::bench {

double peak_bf16_dot_gflops(int64_t iterations);  // AVX-512 region at the end of this file
double peak_amx_bf16_gflops(int64_t iterations);  // AMX region at the end of this file
double peak_fma_avx2_gflops(int64_t iterations);  // AVX2 region at the end of this file
// bench_attention.cc: the decode attention cases on `isas` whose key wanted() accepts.
void run_attention_cases(const BenchOptions& options, const std::function<double()>& bandwidth_gbps,
                         const std::vector<Isa>& isas, bool (*wanted)(const std::string&));

namespace {

struct GemmShape {
  int64_t M, N, K;
  std::string str() const { return fmt::format("{}x{}x{}", M, N, K); }
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};

const GemmShape kGemmShapes[] = {{1024, 1024, 1024}, {512, 2048, 512}};
constexpr int kThreadCounts[] = {1, 2};
// "avx2": oneDNN's FP32 matmul limited to AVX2 (the peer of the avx2 lines only).
const char* const kPeerIsas[] = {"default", "avx512_core_bf16", "avx2"};

// The GEMM shapes: FP8RL_BENCH_KERNELS_SHAPES ("MxNxK,...") or kGemmShapes.
std::vector<GemmShape> gemm_shapes() {
  std::vector<GemmShape> shapes;
  if (const char* env = std::getenv("FP8RL_BENCH_KERNELS_SHAPES")) {
    std::stringstream list(env);
    std::string item;
    while (std::getline(list, item, ',')) {
      GemmShape s{};
      if (std::sscanf(item.c_str(), "%" SCNd64 "x%" SCNd64 "x%" SCNd64, &s.M, &s.N, &s.K) == 3 && s.M > 0 && s.N > 0 &&
          s.K > 0)
        shapes.push_back(s);
    }
  }
  if (shapes.empty()) shapes.assign(std::begin(kGemmShapes), std::end(kGemmShapes));
  return shapes;
}

// Whether the case with this key ("case/shape/isa/threads") runs: FP8RL_BENCH_KERNELS_FILTER.
bool wanted(const std::string& key) {
  static const char* env = std::getenv("FP8RL_BENCH_KERNELS_FILTER");
  if (env == nullptr || *env == '\0') return true;
  static const std::regex re(env);
  return std::regex_search(key, re);
}
std::string case_key(const std::string& name, const std::string& shape, Isa isa, int threads) {
  return fmt::format("{}/{}/{}/{}", name, shape, isa_name(isa), threads);
}

// The GEMM cases of a shape, in the order they run.
std::vector<std::string> gemm_case_names(const GemmShape& s) {
  std::vector<std::string> names = {"gemm_fp32", "gemm_bf16", "gemm_fp8"};
  if (s.M == s.N && s.N == s.K) {
    names.push_back("gemm_fp8_dgrad");
    names.push_back("gemm_fp8_wgrad");
  }
  return names;
}

std::vector<float> random_values(int64_t n, uint64_t seed) {
  std::vector<float> x(static_cast<size_t>(n));
  fill_normal(x.data(), n, 0.0f, 1.0f, seed, 0);
  return x;
}

// ---- the oneDNN peer (child-process side) ----------------------------------------------------

// Times oneDNN's BF16 matmul on each GEMM shape (onednn_peer.cc) and prints one record per shape
// (case "onednn_bf16"); limited to AVX2 ("avx2"), the same matmul in FP32 (case "onednn_f32").
// Prints nothing in a build without oneDNN (which starts no child).
void run_onednn_child(const char* isa, const BenchOptions& options) {
  const bool f32 = std::string(isa) == "avx2";
  const char* threads = std::getenv("OMP_NUM_THREADS");
  const std::vector<GemmShape> shapes = gemm_shapes();
  std::vector<std::array<int64_t, 3>> mnk;
  for (const GemmShape& s : shapes) mnk.push_back({s.M, s.N, s.K});
  const std::vector<OnednnMatmulTime> times = time_onednn_matmuls(isa, mnk, options.repeats);
  for (size_t i = 0; i < times.size(); ++i) {
    const GemmShape& s = shapes[i];
    const double seconds = times[i].seconds;
    nlohmann::ordered_json r = {{"suite", "kernels"}, {"case", f32 ? "onednn_f32" : "onednn_bf16"},
                                {"shape", s.str()},   {"threads", threads ? std::atoi(threads) : 0},
                                {"isa_limit", isa},   {"impl", times[i].impl},
                                {"seconds", seconds}, {"gflops", s.flops() / seconds / 1e9}};
    fmt::print("{}\n", r.dump());
  }
  std::fflush(stdout);
}

// Whether a GEMM line that shows the figure of this peer child is wanted (the AVX2 one: an avx2
// line; the BF16 ones: a line of an AVX-512 or AMX level).
bool peer_needed(const char* isa, int threads, const std::vector<Isa>& isas) {
  const bool avx2_peer = std::string(isa) == "avx2";
  if (avx2_peer && !cpu_features().has_avx2_kernels()) return false;
  for (const GemmShape& s : gemm_shapes())
    for (const std::string& name : gemm_case_names(s))
      for (Isa level : isas)
        if (avx2_peer == (level == Isa::kAvx2) && wanted(case_key(name, s.str(), level, threads))) return true;
  return false;
}
bool any_peer_needed(const std::vector<Isa>& isas) {
  for (const char* isa : kPeerIsas)
    for (int threads : kThreadCounts)
      if (peer_needed(isa, threads, isas)) return true;
  return false;
}

// Runs the peer children and returns their records keyed by (isa_limit, threads, shape). A child
// runs only if peer_needed; none without oneDNN.
using PeerKey = std::tuple<std::string, int, std::string>;
std::map<PeerKey, nlohmann::ordered_json> run_onednn_peers(const BenchOptions& options, const std::vector<Isa>& isas) {
  std::map<PeerKey, nlohmann::ordered_json> peers;
  if (!kHaveOnednn) return peers;
  std::array<char, 4096> exe{};
  const ssize_t len = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  if (len <= 0) return peers;
  for (const char* isa : kPeerIsas)
    for (int threads : kThreadCounts) {
      if (!peer_needed(isa, threads, isas)) continue;
      const std::string cmd =
          fmt::format("OMP_NUM_THREADS={} FP8RL_BENCH_ONEDNN_CHILD={} '{}' bench kernels --json --repeats {}", threads,
                      isa, exe.data(), options.repeats);
      FILE* pipe = popen(cmd.c_str(), "r");
      if (pipe == nullptr) continue;
      std::array<char, 8192> line{};
      while (std::fgets(line.data(), static_cast<int>(line.size()), pipe) != nullptr) {
        const auto record = nlohmann::ordered_json::parse(line.data(), nullptr, /*allow_exceptions=*/false);
        if (record.is_discarded() ||
            (record.value("case", "") != "onednn_bf16" && record.value("case", "") != "onednn_f32"))
          continue;
        peers[{isa, threads, record.value("shape", "")}] = record;
      }
      pclose(pipe);
    }
  return peers;
}

// Streams a buffer larger than the last-level cache, so that the next run starts cold.
void flush_caches(const AlignedBuffer<uint64_t>& buffer) {
  uint64_t acc[8] = {};
  for (size_t i = 0; i + 8 <= buffer.size(); i += 8)
    for (int j = 0; j < 8; ++j) acc[j] ^= buffer[i + static_cast<size_t>(j)];
  volatile uint64_t sink = acc[0] ^ acc[1] ^ acc[2] ^ acc[3] ^ acc[4] ^ acc[5] ^ acc[6] ^ acc[7];
  (void)sink;
}

// Median time of `fn` with caches flushed before every run (one warm-up run first).
double time_cold(const std::function<void()>& fn, int repeats, const AlignedBuffer<uint64_t>& flush) {
  fn();
  std::vector<double> times;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    flush_caches(flush);
    Timer t;
    fn();
    times.push_back(t.seconds());
  }
  return median(times);
}

// The levels whose GEMMs and GEMVs the bench compares: AVX2, AVX-512 and AMX where present and
// not above FP8RL_ISA's cap (the portable level only when nothing faster runs).
std::vector<Isa> fast_isas() {
  std::vector<Isa> isas;
  for (Isa isa : isa_levels_up_to_auto())
    if (isa != Isa::kPortable) isas.push_back(isa);
  if (isas.empty()) isas.push_back(Isa::kPortable);
  return isas;
}

// The GEMV levels: each level batch invariant (its GEMV rows are its GEMM's rows), and on an AMX
// machine also the default dispatch without invariance, where a single row runs the AVX-512
// kernels ("isa": "auto").
std::vector<std::pair<Isa, bool>> gemv_levels() {
  std::vector<std::pair<Isa, bool>> levels;  // (isa, batch_invariant)
  for (Isa isa : fast_isas()) levels.emplace_back(isa, true);
  if (cpu_features().has_amx_kernels()) levels.emplace_back(Isa::kAuto, false);
  return levels;
}
constexpr int64_t kGemvN = 8192, kGemvK = 8192;
std::string gemv_shape(int64_t M) { return fmt::format("{}x{}x{}", M, kGemvN, kGemvK); }

// Whether any case of run_gemv_cases is wanted (the read bandwidth is measured only for them).
bool gemv_cases_wanted() {
  for (const auto& [isa, invariant] : gemv_levels())
    for (const char* name : {"gemv_bf16", "gemv_fp8"})
      for (int64_t M : {int64_t{1}, int64_t{8}})
        for (int threads : kThreadCounts)
          if (wanted(case_key(name, gemv_shape(M), isa, threads))) return true;
  for (int threads : kThreadCounts)
    if (wanted(case_key("pack_fp8_weights", fmt::format("{}x{}", kGemvN, kGemvK), Isa::kAuto, threads))) return true;
  return false;
}

// Decode GEMV on 8192 x 8192 weights (128 MiB in BF16, 64 MiB in FP8), cold, and the refit's
// packing of the FP8 weights from the FP32 master.
void run_gemv_cases(const BenchOptions& options, double bandwidth) {
  const int64_t N = kGemvN, K = kGemvK;
  const std::vector<float> master = random_values(N * K, 21);
  std::vector<bf16_t> master_bf16(master.size());
  bf16_encode_f32(master.data(), master_bf16.data(), N * K);
  PackedGemvWeights wb, w8;
  pack_gemv_weights_bf16(master_bf16.data(), N, K, K, wb);
  pack_gemv_weights_fp8(master.data(), N, K, K, ScaleFormat::kFp32, w8);
  const std::vector<float> xf = random_values(kGemvMaxRows * K, 22);
  std::vector<bf16_t> xh(xf.size());
  bf16_encode_f32(xf.data(), xh.data(), kGemvMaxRows * K);
  AlignedBuffer<uint64_t> flush(size_t{1} << 27);  // 1 GiB, more than this machine's L3
  for (size_t i = 0; i < flush.size(); ++i) flush[i] = i;
  std::vector<float> y(static_cast<size_t>(kGemvMaxRows * N));

  const std::vector<std::pair<Isa, bool>> levels = gemv_levels();
  std::map<std::tuple<Isa, int64_t, int>, double> bf16_tokens;    // (isa, M, threads) -> tokens/s
  std::map<std::tuple<Isa, std::string, int>, double> m1_tokens;  // (isa, case, threads) -> tokens/s
  for (const auto& [isa, invariant] : levels)
    for (const char* name : {"gemv_bf16", "gemv_fp8"})
      for (int64_t M : {int64_t{1}, int64_t{8}})
        for (int threads : kThreadCounts) {
          const bool fp8 = std::string(name) == "gemv_fp8";
          // Filtered out: only the figures the ratios of later lines need are measured.
          const bool needed_later = !fp8 || M == 1;
          if (!wanted(case_key(name, gemv_shape(M), isa, threads)) && !needed_later) continue;
          const GemvOptions o{isa, threads, invariant};
          const QuantizedTensor xq =
              quantize(TensorView::contiguous(const_cast<float*>(xf.data()), DType::kF32, Shape{M, K}),
                       ScalingMode::kRows1x128, ScaleFormat::kFp32);
          const PackedGemvWeights& w = fp8 ? w8 : wb;
          const double seconds = time_cold(
              [&] {
                if (fp8) {
                  gemv_fp8(w, xq.rowwise, y.data(), N, o);
                } else {
                  gemv_bf16(w, M, xh.data(), K, y.data(), N, o);
                }
              },
              options.repeats, flush);
          const double gbps = static_cast<double>(w.weight_bytes()) / seconds / 1e9,
                       tokens = static_cast<double>(M) / seconds;
          nlohmann::ordered_json r = {{"suite", "kernels"},
                                      {"case", name},
                                      {"shape", fmt::format("{}x{}x{}", M, N, K)},
                                      {"M", M},
                                      {"activations", fp8 ? "fp8_1x128" : "bf16"},
                                      {"isa", isa_name(isa)},
                                      {"batch_invariant", invariant},
                                      {"threads", threads},
                                      {"seconds", seconds},
                                      {"gbps", gbps},
                                      {"tokens_per_s", tokens},
                                      {"limit", "read_bandwidth"},
                                      {"limit_gbps", bandwidth},
                                      {"ratio_to_limit", gbps / bandwidth}};
          if (!fp8) bf16_tokens[{isa, M, threads}] = tokens;
          if (fp8) r["speedup_vs_gemv_bf16"] = tokens / bf16_tokens[{isa, M, threads}];
          if (M == 1) m1_tokens[{isa, name, threads}] = tokens;
          if (M > 1) r["speedup_vs_m1"] = tokens / m1_tokens[{isa, name, threads}];
          if (wanted(case_key(name, gemv_shape(M), isa, threads))) emit(r, options);
        }

  for (int threads : kThreadCounts) {
    if (!wanted(case_key("pack_fp8_weights", fmt::format("{}x{}", N, K), Isa::kAuto, threads))) continue;
    const GemvOptions o{Isa::kAuto, threads, false};
    const double seconds =
        time_median([&] { pack_gemv_weights_fp8(master.data(), N, K, K, ScaleFormat::kFp32, w8, o); }, options.repeats);
    const double gbps = static_cast<double>(N * K * 4) / seconds / 1e9;
    emit({{"suite", "kernels"},
          {"case", "pack_fp8_weights"},
          {"shape", fmt::format("{}x{}", N, K)},
          {"source", "fp32_master"},
          {"threads", threads},
          {"seconds", seconds},
          {"gbps", gbps},
          {"limit", "read_bandwidth"},
          {"limit_gbps", bandwidth},
          {"ratio_to_limit", gbps / bandwidth}},
         options);
  }
}

// Adds the peer's figures (default and AVX-512-limited BF16; on avx2 lines also the AVX2-limited
// FP32 one) and our ratios to a GEMM record.
void add_peer(nlohmann::ordered_json& r, const std::map<PeerKey, nlohmann::ordered_json>& peers, int threads,
              const std::string& shape, Isa level) {
  for (const char* isa : kPeerIsas) {
    const bool avx2_peer = std::string(isa) == "avx2";
    if (avx2_peer && level != Isa::kAvx2) continue;
    const auto it = peers.find({isa, threads, shape});
    if (it == peers.end()) continue;
    const std::string suffix = std::string(isa) == "default" ? "" : avx2_peer ? "_avx2" : "_avx512";
    const double g = it->second.value("gflops", 0.0);
    r["peer" + suffix] = avx2_peer ? "onednn_f32" : "onednn_bf16";
    r["peer_gflops" + suffix] = g;
    r["ratio_to_peer" + suffix] = r.value("gflops", 0.0) / g;
  }
}

}  // namespace

void run_kernels_bench(const BenchOptions& options) {
  if (const char* child = std::getenv("FP8RL_BENCH_ONEDNN_CHILD")) {
    run_onednn_child(child, options);
    return;
  }
  const bool avx512 = cpu_features().has_avx512_kernels();
  if (!options.json)
    fmt::print("# kernels bench: medians of {} runs after a warm-up (peaks: the fastest run); CPU: {}\n",
               options.repeats, cpu_features().describe());

  // Limits.
  double peak_avx2 = 0.0;
  if (cpu_features().has_avx2_kernels()) {
    std::vector<double> runs;
    for (int i = 0; i < options.repeats; ++i) runs.push_back(peak_fma_avx2_gflops(20'000'000));
    peak_avx2 = fastest(runs);
    emit({{"suite", "kernels"}, {"case", "peak_fma_avx2"}, {"threads", 1}, {"gflops", peak_avx2}}, options);
  }
  double peak = 0.0;
  if (avx512) {
    std::vector<double> runs;
    for (int i = 0; i < options.repeats; ++i) runs.push_back(peak_bf16_dot_gflops(20'000'000));
    peak = fastest(runs);
    emit({{"suite", "kernels"}, {"case", "peak_bf16_dot"}, {"threads", 1}, {"gflops", peak}}, options);
  }
  double peak_amx = 0.0;
  if (cpu_features().has_amx_kernels()) {
    std::vector<double> runs;
    for (int i = 0; i < options.repeats; ++i) runs.push_back(peak_amx_bf16_gflops(2'000'000));
    peak_amx = fastest(runs);
    emit({{"suite", "kernels"}, {"case", "peak_amx_bf16"}, {"threads", 1}, {"gflops", peak_amx}}, options);
  }
  // The streaming read bandwidth, measured (and printed) once, before the first case compared with it.
  double bandwidth = 0.0;
  const auto read_bandwidth = [&] {
    if (bandwidth == 0.0) {
      bandwidth = measure_read_bandwidth_gbps(int64_t{1} << 30, options.repeats);
      emit({{"suite", "kernels"},
            {"case", "read_bandwidth"},
            {"threads", 1},
            {"gbps", bandwidth},
            {"bytes", int64_t{1} << 30}},
           options);
    }
    return bandwidth;
  };
  const bool gemv = gemv_cases_wanted();
  if (gemv) read_bandwidth();

  // The peer, printed as measured. A build without oneDNN says so in one record instead (the GEMM
  // lines then have no peer figures).
  if (!kHaveOnednn && any_peer_needed(fast_isas()))
    emit({{"suite", "kernels"},
          {"case", "onednn"},
          {"skipped", "this build has no oneDNN (CMake did not find it; Debian: libdnnl-dev), no peer figures"}},
         options);
  const auto peers = run_onednn_peers(options, fast_isas());
  for (const auto& [key, record] : peers) emit(record, options);

  // GEMMs.
  for (const GemmShape& s : gemm_shapes()) {
    const std::vector<float> a = random_values(s.M * s.K, 1), b = random_values(s.N * s.K, 2);
    std::vector<bf16_t> ah(a.size()), bh(b.size());
    bf16_encode_f32(a.data(), ah.data(), s.M * s.K);
    bf16_encode_f32(b.data(), bh.data(), s.N * s.K);
    const QuantizedTensor x =
        quantize(TensorView::contiguous(const_cast<float*>(a.data()), DType::kF32, Shape{s.M, s.K}),
                 ScalingMode::kRows1x128, ScaleFormat::kFp32, /*with_columnwise=*/true);
    const QuantizedTensor w =
        quantize(TensorView::contiguous(const_cast<float*>(b.data()), DType::kF32, Shape{s.N, s.K}),
                 ScalingMode::kBlocks128x128, ScaleFormat::kFp32, /*with_columnwise=*/false);
    // dY [M, N] for dgrad and wgrad.
    const std::vector<float> dy = random_values(s.M * s.N, 3);
    const QuantizedTensor g =
        quantize(TensorView::contiguous(const_cast<float*>(dy.data()), DType::kF32, Shape{s.M, s.N}),
                 ScalingMode::kRows1x128, ScaleFormat::kFp32, /*with_columnwise=*/true);
    // The largest output of the cases: fprop [M, N], dgrad [M, K], wgrad [N, K].
    std::vector<float> c(static_cast<size_t>(std::max({s.M * s.N, s.M * s.K, s.N * s.K})));
    const bool cube = s.M == s.N && s.N == s.K;
    struct Case {
      const char* name;
      std::function<void(const GemmOptions&)> run;
    };
    std::vector<Case> cases = {
        {"gemm_fp32",
         [&](const GemmOptions& o) {
           gemm_nt_f32(s.M, s.N, s.K, a.data(), s.K, b.data(), s.K, c.data(), s.N, /*accumulate=*/false, o);
         }},
        {"gemm_bf16",
         [&](const GemmOptions& o) {
           gemm_nt_bf16(s.M, s.N, s.K, ah.data(), s.K, bh.data(), s.K, c.data(), s.N, /*accumulate=*/false, o);
         }},
        {"gemm_fp8",
         [&](const GemmOptions& o) { gemm_nt_fp8(x.rowwise, w.rowwise, c.data(), s.N, /*accumulate=*/false, o); }},
    };
    if (cube) {  // dgrad dX[M,K] = dY W (W as stored); wgrad dW[N,K] = dY^T X (shapes equal at M = N = K)
      cases.push_back({"gemm_fp8_dgrad", [&](const GemmOptions& o) {
                         gemm_nn_fp8(g.rowwise, w.rowwise, c.data(), s.K, /*accumulate=*/false, o);
                       }});
      cases.push_back({"gemm_fp8_wgrad", [&](const GemmOptions& o) {
                         gemm_nt_fp8(*g.columnwise, *x.columnwise, c.data(), s.K, /*accumulate=*/false, o);
                       }});
    }
    for (const Case& cs : cases)
      for (Isa isa : fast_isas())
        for (int threads : kThreadCounts) {
          if (isa == Isa::kAmx && std::string(cs.name) == "gemm_fp32") continue;  // FP32 has no AMX path
          if (!wanted(case_key(cs.name, s.str(), isa, threads))) continue;
          const GemmOptions o{isa, threads, false};
          const double seconds = time_median([&] { cs.run(o); }, options.repeats);
          nlohmann::ordered_json r = {{"suite", "kernels"},
                                      {"case", cs.name},
                                      {"shape", s.str()},
                                      {"isa", isa_name(isa)},
                                      {"threads", threads},
                                      {"seconds", seconds},
                                      {"gflops", s.flops() / seconds / 1e9}};
          const double limit = isa == Isa::kAmx ? peak_amx : isa == Isa::kAvx2 ? peak_avx2 : peak;
          if (limit > 0) {
            r["limit"] = isa == Isa::kAmx    ? "peak_amx_bf16 x threads"
                         : isa == Isa::kAvx2 ? "peak_fma_avx2 x threads"
                                             : "peak_bf16_dot x threads";
            r["limit_gflops"] = limit * threads;
            r["ratio_to_limit"] = s.flops() / seconds / 1e9 / (limit * threads);
          }
          add_peer(r, peers, threads, s.str(), isa);
          emit(r, options);
        }
  }
  if (gemv) run_gemv_cases(options, read_bandwidth());

  // Decode attention: AMX machines run the AVX-512 attention kernels, so that level is not repeated.
  std::vector<Isa> attention_isas;
  for (Isa isa : fast_isas())
    if (isa != Isa::kAmx) attention_isas.push_back(isa);
  run_attention_cases(options, read_bandwidth, attention_isas, wanted);
}

}  // namespace fp8rl::bench

FP8RL_AVX512_BEGIN
namespace fp8rl::bench {

// Register-only vdpbf16ps: 24 independent accumulators (enough to cover the latency on two FMA
// ports), each instruction 16 lanes x 2 multiply-adds = 64 flops.
double peak_bf16_dot_gflops(int64_t iterations) {
  __m512 acc[24];  // every loop over acc fully unrolled, so that it lives in registers
#pragma GCC unroll 24
  for (int i = 0; i < 24; ++i) acc[i] = _mm512_setzero_ps();
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3F803F80);  // (1.0, 1.0)
  const __m512bh y = (__m512bh)_mm512_set1_epi32(0x33803380);  // tiny, so sums stay finite
  Timer t;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 24
    for (int i = 0; i < 24; ++i) {
      acc[i] = _mm512_dpbf16_ps(acc[i], x, y);
      __asm__ volatile("" : "+v"(acc[i]));  // one register per accumulator, kept out of memory
    }
  }
  const double seconds = t.seconds();
  __m512 sum = acc[0];
#pragma GCC unroll 24
  for (int i = 1; i < 24; ++i) sum = _mm512_add_ps(sum, acc[i]);
  volatile float sink = _mm512_reduce_add_ps(sum);
  (void)sink;
  return static_cast<double>(iterations) * 24 * 64 / seconds / 1e9;
}

}  // namespace fp8rl::bench
FP8RL_AVX512_END

FP8RL_AMX_BEGIN
#include "kernels/simd/amx_tiles_inl.h"  // inside the region by design (see that header)
namespace fp8rl::bench {

// Register-only AMX: four independent 16 x 16 accumulator tiles; each tile dot product is
// 16 x 16 x 32 multiply-adds = 16384 flops.
double peak_amx_bf16_gflops(int64_t iterations) {
  amx::configure_16x64_tiles();
  alignas(64) static uint16_t operand[16 * 32];
  for (uint16_t& v : operand) v = 0x3380;  // tiny, so sums stay finite
  alignas(64) float out[16 * 16];
  _tile_zero(0);
  _tile_zero(1);
  _tile_zero(2);
  _tile_zero(3);
  _tile_loadd(4, operand, 64);
  _tile_loadd(5, operand, 64);
  _tile_loadd(6, operand, 64);
  _tile_loadd(7, operand, 64);
  Timer t;
  for (int64_t it = 0; it < iterations; ++it) {
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  const double seconds = t.seconds();
  _tile_stored(0, out, 64);
  volatile float sink = out[0];
  (void)sink;
  return static_cast<double>(iterations) * 4 * 16384 / seconds / 1e9;
}

}  // namespace fp8rl::bench
FP8RL_AMX_END

FP8RL_AVX2_BEGIN
namespace fp8rl::bench {

// Register-only 256-bit FMAs (vfmadd231ps ymm): 12 independent accumulators (enough to cover a
// 4-5 cycle latency on two FMA pipes, within 16 ymm registers), each instruction 8 lanes x 2 =
// 16 flops. The limit of the AVX2 GEMMs, which run on FP32 FMAs whatever the operand type.
double peak_fma_avx2_gflops(int64_t iterations) {
  __m256 acc[12];  // every loop over acc fully unrolled, so that it lives in registers
#pragma GCC unroll 12
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_setzero_ps();
  const __m256 x = _mm256_set1_ps(1.0f);
  const __m256 y = _mm256_set1_ps(1e-30f);  // tiny, so sums stay finite
  Timer t;
  for (int64_t it = 0; it < iterations; ++it) {
#pragma GCC unroll 12
    for (int i = 0; i < 12; ++i) acc[i] = _mm256_fmadd_ps(x, y, acc[i]);
    // All twelve opaque to the compiler (which would otherwise merge the identical chains).
    __asm__ volatile(""
                     : "+x"(acc[0]), "+x"(acc[1]), "+x"(acc[2]), "+x"(acc[3]), "+x"(acc[4]), "+x"(acc[5]), "+x"(acc[6]),
                       "+x"(acc[7]), "+x"(acc[8]), "+x"(acc[9]), "+x"(acc[10]), "+x"(acc[11]));
  }
  const double seconds = t.seconds();
  __m256 sum = acc[0];
#pragma GCC unroll 12
  for (int i = 1; i < 12; ++i) sum = _mm256_add_ps(sum, acc[i]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  volatile float sink = lanes[0];
  (void)sink;
  return static_cast<double>(iterations) * 12 * 16 / seconds / 1e9;
}

}  // namespace fp8rl::bench
FP8RL_AVX2_END
