#include "arch/config.h"

#include <cmath>

#include "core/check.h"

namespace fp8rl {

void ModelConfig::validate() const {
  FP8RL_REQUIRE(vocab_size > 0, "model config: vocab_size must be > 0, got {}", vocab_size);
  FP8RL_REQUIRE(d_model > 0 && n_layers > 0 && d_ff > 0 && max_seq_len > 0,
              "model config: d_model, n_layers, d_ff, max_seq_len must be > 0, got {}, {}, {}, {}", d_model, n_layers,
              d_ff, max_seq_len);
  FP8RL_REQUIRE(n_heads > 0 && n_kv_heads > 0 && n_heads % n_kv_heads == 0,
              "model config: n_heads ({}) must be a positive multiple of n_kv_heads ({})", n_heads, n_kv_heads);
  FP8RL_REQUIRE(head_dim > 0 && head_dim % 2 == 0, "model config: head_dim must be even and > 0, got {}", head_dim);
  FP8RL_REQUIRE(rope_theta > 0 && std::isfinite(rope_theta), "model config: rope_theta must be finite and > 0, got {}",
                rope_theta);
  // As an FP32 number (1e306 in a config.json reads as infinity): the norms add it to a mean square.
  FP8RL_REQUIRE(norm_eps > 0 && norm_eps <= 1, "model config: norm_eps (rms_norm_eps) must be in (0, 1], got {}",
                norm_eps);
  FP8RL_REQUIRE(num_experts >= 0, "model config: num_experts must be >= 0, got {}", num_experts);
  if (!is_moe()) return;
  FP8RL_REQUIRE(experts_per_token >= 1 && experts_per_token <= num_experts,
                "model config: experts_per_token (num_experts_per_tok) must be 1 to num_experts ({}), got {}",
                num_experts, experts_per_token);
  FP8RL_REQUIRE(d_expert > 0, "model config: d_expert (moe_intermediate_size) must be > 0, got {}", d_expert);
  FP8RL_REQUIRE(decoder_sparse_step >= 1, "model config: decoder_sparse_step must be >= 1, got {}",
                decoder_sparse_step);
  for (int64_t l : mlp_only_layers)
    FP8RL_REQUIRE(l >= 0 && l < n_layers, "model config: mlp_only_layers has {}, outside the {} layers", l, n_layers);
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
  if (!is_moe() || (layer + 1) % decoder_sparse_step != 0) return false;
  for (int64_t l : mlp_only_layers)
    if (l == layer) return false;
  return true;
}

int64_t ModelConfig::num_moe_layers() const {
  int64_t n = 0;
  for (int64_t l = 0; l < n_layers; ++l) n += is_moe_layer(l);
  return n;
}

ModelConfig model_preset(std::string_view name, int64_t vocab_size) {
  ModelConfig c;
  c.preset = std::string(name);
  c.vocab_size = vocab_size;
  if (name == "tiny") {
    c.d_model = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.d_ff = 192;
    c.max_seq_len = 64;
  } else if (name == "small") {
    c.d_model = 256, c.n_layers = 4, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 32, c.d_ff = 768;
    c.max_seq_len = 128;
  } else if (name == "medium") {
    c.d_model = 512, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 4, c.head_dim = 64, c.d_ff = 1536;
    c.max_seq_len = 512;
  } else if (name == "large") {
    // For decode benchmarks only (bench generate): about 755 M linear parameters, so its FP8
    // weights (~720 MiB) exceed the L3 of the development machines (up to 480 MiB) and decode
    // streams them from DRAM. Training it would need ~12 GB of FP32 masters and AdamW state.
    c.d_model = 2048, c.n_layers = 16, c.n_heads = 16, c.n_kv_heads = 8, c.head_dim = 128, c.d_ff = 5632;
    c.max_seq_len = 2048;
  } else if (name == "tiny-moe" || name == "small-moe") {
    // tiny and small as Qwen3-MoE: q/k-norm and an MoE MLP in every layer, 8 experts of a third
    // of d_ff, 2 per token (so a token's MLP costs two thirds of the dense one's).
    c = model_preset(name == "tiny-moe" ? "tiny" : "small", vocab_size);
    c.preset = std::string(name);
    c.num_experts = 8, c.experts_per_token = 2, c.d_expert = c.d_ff / 3;
    c.qk_norm = true;  // Qwen3-MoE's
  } else if (name == "qwen3-0.6b") {
    // Qwen3-0.6B's shapes (its config.json), with its vocabulary whatever the tokenizer: random
    // weights of a real model's size, for benchmarks and memory tests (596 M parameters).
    c.vocab_size = 151936;
    c.d_model = 1024, c.n_layers = 28, c.n_heads = 16, c.n_kv_heads = 8, c.head_dim = 128, c.d_ff = 3072;
    c.max_seq_len = 4096, c.rope_theta = 1000000.0, c.qk_norm = true, c.norm_eps = 1e-6f;
  } else if (name == "llama-3.2-1b") {
    // Llama-3.2-1B's shapes (1.24 B parameters), Llama 3 RoPE scaling, tied embeddings.
    c.vocab_size = 128256;
    c.d_model = 2048, c.n_layers = 16, c.n_heads = 32, c.n_kv_heads = 8, c.head_dim = 64, c.d_ff = 8192;
    c.max_seq_len = 4096, c.rope_theta = 500000.0, c.norm_eps = 1e-5f;
    c.rope_llama3_scaling = true;
    c.rope_scaling = {32.0, 1.0, 4.0, 8192.0};
  } else {
    FP8RL_REQUIRE(false, "unknown model preset '{}' (known: {})", name, kModelPresetNames);
  }
  c.validate();
  return c;
}

}  // namespace fp8rl
