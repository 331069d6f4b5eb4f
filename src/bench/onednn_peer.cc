// The oneDNN peer of `fp8rl bench kernels` (onednn_peer.h); compiled only where CMake found oneDNN.
#include "bench/onednn_peer.h"

#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>

#include "bench/bench_report.h"
#include "core/rng.h"
#include "numerics/codec.h"

namespace fp8rl::bench {

std::vector<OnednnMatmulTime> time_onednn_matmuls(const std::string& isa_limit,
                                                  const std::vector<std::array<int64_t, 3>>& shapes, int repeats) {
  const bool f32 = isa_limit == "avx2";
  if (isa_limit == "avx512_core_bf16") dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx512_core_bf16);
  if (f32) dnnl::set_max_cpu_isa(dnnl::cpu_isa::avx2);
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  dnnl::stream stream(engine);
  const dt in_type = f32 ? dt::f32 : dt::bf16;
  // Random N(0, 1) operands (seeds 1 and 2), in the operand type.
  const auto fill = [f32](dnnl::memory& m, int64_t n, uint64_t seed) {
    std::vector<float> x(static_cast<size_t>(n));
    fill_normal(x.data(), n, 0.0f, 1.0f, seed, 0);
    if (f32) {
      std::copy(x.begin(), x.end(), static_cast<float*>(m.get_data_handle()));
    } else {
      bf16_encode_f32(x.data(), static_cast<bf16_t*>(m.get_data_handle()), n);
    }
  };
  std::vector<OnednnMatmulTime> times;
  for (const auto& [M, N, K] : shapes) {
    const dnnl::memory::desc a_md({M, K}, in_type, tag::ab), b_md({K, N}, in_type, tag::ba),
        c_md({M, N}, dt::f32, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    const dnnl::matmul matmul(pd);
    dnnl::memory a(a_md, engine), b(b_md, engine), c(c_md, engine);
    fill(a, M * K, 1);
    fill(b, N * K, 2);
    const double seconds = time_median(
        [&] {
          matmul.execute(stream, {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DST, c}});
          stream.wait();
        },
        repeats);
    times.push_back({seconds, pd.impl_info_str()});
  }
  return times;
}

}  // namespace fp8rl::bench
