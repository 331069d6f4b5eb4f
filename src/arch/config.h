// The transformer's architecture: a Llama-3 / Qwen2 / Qwen3 decoder, dense or with
// Mixture-of-Experts MLPs (Qwen3-MoE).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/elementwise/rope.h"

namespace fp8rl {

struct ModelConfig {
  std::string preset;          // name of the preset it came from ("custom" otherwise)
  int64_t vocab_size = 0;      // V
  int64_t d_model = 0;         // C
  int64_t n_layers = 0;        // L
  int64_t n_heads = 0;         // Hq
  int64_t n_kv_heads = 0;      // Hkv (grouped-query attention: Hq % Hkv == 0)
  int64_t head_dim = 0;        // D
  int64_t d_ff = 0;            // F, SwiGLU hidden size
  int64_t max_seq_len = 0;     // positions in the RoPE table
  double rope_theta = 10000.0;
  bool rope_llama3_scaling = false;
  RopeScaling rope_scaling;    // used when rope_llama3_scaling
  bool qk_norm = false;        // Qwen3: RMSNorm over each head of q and k before RoPE
  bool qkv_bias = false;       // Qwen2: biases on the q, k and v projections
  float norm_eps = 1e-6f;
  bool tie_embeddings = true;  // LM head shares the embedding matrix
  // Mixture of Experts (Qwen3-MoE; num_experts 0: dense). Layer l's MLP is an MoE block
  // (model/moe.h) unless l is in mlp_only_layers, where it is the dense SwiGLU of d_ff, as in
  // HF's Qwen3MoeDecoderLayer: MoE where (l + 1) % decoder_sparse_step == 0.
  int64_t num_experts = 0;        // E
  int64_t experts_per_token = 0;  // k (num_experts_per_tok)
  int64_t d_expert = 0;           // each expert's SwiGLU hidden size (moe_intermediate_size)
  bool norm_topk_prob = true;     // the k weights renormalized to sum to 1
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  // Throws fp8rl::Error naming the first inconsistent field.
  void validate() const;
  int64_t q_dim() const { return n_heads * head_dim; }
  int64_t kv_dim() const { return n_kv_heads * head_dim; }
  bool is_moe() const { return num_experts > 0; }
  bool is_moe_layer(int64_t layer) const;
  int64_t num_moe_layers() const;
};

// Named presets: "tiny" (tests), "small" (the default demo), "medium" (benchmarks, ~25M
// parameters), "large" (decode benchmarks only, ~755M: FP8 weights larger than the L3),
// "tiny-moe" and "small-moe" (tiny and small as Qwen3-MoE: q/k-norm, 8 experts, 2 per token), and the
// shapes of real checkpoints with their own vocabularies (`vocab_size` is ignored for them):
// "qwen3-0.6b" (Qwen3-0.6B: 28 layers, C 1024, 16/8 heads of 128, F 3072, V 151,936, q/k-norm,
// tied) and "llama-3.2-1b" (Llama-3.2-1B: 16 layers, C 2048, 32/8 heads of 64, F 8192,
// V 128,256, Llama 3 RoPE scaling, tied). Throws for an unknown name, listing the known ones.
inline constexpr const char* kModelPresetNames =
    "tiny, small, medium, large, tiny-moe, small-moe, qwen3-0.6b, llama-3.2-1b";
ModelConfig model_preset(std::string_view name, int64_t vocab_size);

}  // namespace fp8rl
