// `fp8rl demo`: a short tour of the FP8 numerics on one random tensor.
#pragma once

#include <cstdint>

namespace fp8rl::cli {

// Quantizes a random [rows, 1024] tensor (elements / 1024 rows) in every scaling mode, prints
// the round-trip error of each and one throughput line.
void run_demo(int64_t elements);

}  // namespace fp8rl::cli
