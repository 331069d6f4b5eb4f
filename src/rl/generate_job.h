// `fp8rl generate`: samples from a checkpoint with the generation engine and prints each sample
// with its per-token log-probs.
#pragma once

#include <cstdint>
#include <string>

namespace fp8rl {

struct GenerateJobOptions {
  std::string checkpoint;
  std::string prompt;
  int64_t num_samples = 8;
  int64_t max_new_tokens = 16;
  double temperature = 1.0;
  double top_p = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 1;
  std::string precision = "bf16";       // generator linears: bf16 | fp8
  std::string kv_cache_dtype = "bf16";  // bf16 | fp8
  bool batch_invariant = true;          // EngineOptions::batch_invariant
};

void run_generate_job(const GenerateJobOptions& options);

}  // namespace fp8rl
