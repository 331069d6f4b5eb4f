// The generator's paged KV cache: K and V of every layer for every cached token, in BF16 or in
// FP8 E4M3 with FP32 scales for K and for V, one per layer (docs/recipe.md section 6) or one per
// KV head of each layer (generation.kv_scale_granularity: head).
//
// Storage: per layer, a K pool and a V pool of `num_pages` pages of `kPageTokens` tokens, each
// token a row of kv_dim = Hkv * D elements (2 bytes in BF16, 1 byte in FP8):
//   k_pool[layer] [num_pages][kPageTokens][kv_dim]
// A sequence owns a list of pages (KvBlockList); the G samples of a prompt read the prompt's
// pages (shared prefix) and append their own tokens to pages of their own. Pages return to the
// free list when a sequence finishes, so memory is reused while other sequences run.
//
// FP8 entries are e4m3(k / k_scale) and e4m3(v / v_scale), with the scales of the entry's layer
// (or of its KV head); the scales are set by the refit step after every training step and must be
// finite and positive (set_scales refuses anything else).
//
// Admission: reserve() never hands out part of what is asked; a sequence whose pages are not free
// waits (GenerationEngine counts it) and is never truncated.
#pragma once

#include <cstdint>
#include <vector>

#include "core/aligned_buffer.h"
#include "kernels/attention/attention_row.h"
#include "numerics/bf16.h"

namespace fp8rl {

// The KV cache stores DType::kBF16 or DType::kE4M3 rows; recipes name them "bf16" and "fp8".
const char* kv_dtype_name(DType d);

inline constexpr int64_t kPageTokens = 16;
// Pages that hold `tokens` positions (tokens >= 0).
inline constexpr int64_t kv_pages_for(int64_t tokens) { return (tokens + kPageTokens - 1) / kPageTokens; }

// One layer's scales of the Q/K/V quantization (FP8 KV cache and FP8 attention).
struct QkvScales {
  float q = 0.0f, k = 0.0f, v = 0.0f;  // the layer's scales (0: not set)
  // Per-head scales, empty with per-layer scales: k_heads, v_heads [Hkv]; q_heads [Hkv] too, one
  // per KV head's GQA group of query heads (the group's scores share its K codes and one scale).
  // With them set, q, k and v are their maxima (what the layer's scales would be).
  std::vector<float> q_heads, k_heads, v_heads;

  bool per_head() const { return !k_heads.empty(); }
  float q_of(int64_t kv_head) const { return q_heads.empty() ? q : q_heads[static_cast<size_t>(kv_head)]; }
  float k_of(int64_t kv_head) const { return k_heads.empty() ? k : k_heads[static_cast<size_t>(kv_head)]; }
  float v_of(int64_t kv_head) const { return v_heads.empty() ? v : v_heads[static_cast<size_t>(kv_head)]; }
};

// The pages of one sequence, in position order.
struct KvBlockList {
  std::vector<int32_t> pages;
  int64_t tokens = 0;  // positions written
};

class KvCache {
 public:
  KvCache() = default;
  // A cache of `budget_bytes` of K/V storage (at least one page); a token's row per layer is
  // n_kv_heads * head_dim elements.
  KvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, DType dtype, int64_t budget_bytes);

  DType dtype() const { return dtype_; }
  int64_t element_bytes() const { return dtype_ == DType::kE4M3 ? 1 : 2; }
  int64_t bytes_per_token() const { return bytes_per_token(n_layers_, kv_dim_, dtype_); }
  static int64_t bytes_per_token(int64_t n_layers, int64_t kv_dim, DType dtype) {
    return 2 * n_layers * kv_dim * (dtype == DType::kE4M3 ? 1 : 2);
  }
  int64_t num_pages() const { return num_pages_; }
  int64_t capacity_tokens() const { return num_pages_ * kPageTokens; }
  int64_t storage_bytes() const;  // K/V pools plus the scales
  int64_t free_pages() const { return static_cast<int64_t>(free_.size()); }

  // Takes pages for `tokens` more positions of `seq`; false (and nothing taken) if there are
  // not enough free pages.
  bool reserve(KvBlockList& seq, int64_t tokens);
  void release(KvBlockList& seq);
  // Returns the pools' memory to the system (every page must be free): the storage is mapped
  // lazily (core/aligned_buffer.h), so only pages written again count towards the resident set.
  void release_memory();

  // Writes one token's K and V rows (kv_dim floats each, BF16-valued) of `layer` at position
  // `pos` of `seq` (pages must be reserved).
  void write(const KvBlockList& seq, int64_t layer, int64_t pos, const float* k, const float* v);
  // Row pointers into the pools (kv_dim elements: bf16_t or E4M3 codes).
  const uint8_t* k_row(const KvBlockList& seq, int64_t layer, int64_t pos) const;
  const uint8_t* v_row(const KvBlockList& seq, int64_t layer, int64_t pos) const;

  // Appends one run per page for positions [0, tokens) of `seq` in `layer`, each row starting
  // `offset` elements in (a kv head's columns): what attention_row_kv reads, no copy.
  void append_runs(const KvBlockList& seq, int64_t layer, int64_t tokens, int64_t offset,
                   std::vector<AttentionRows>& runs) const;

  // Validated: every k and v scale finite and > 0 (and q when `need_q`), one entry per layer;
  // per-head scales, where given, one per KV head for each of q, k, v.
  void set_scales(const std::vector<QkvScales>& scales, bool need_q);
  bool scales_set() const { return scales_set_; }
  void invalidate_scales() { scales_set_ = false; }
  const QkvScales& scales(int64_t layer) const { return scales_[static_cast<size_t>(layer)]; }

 private:
  uint8_t* row(std::vector<AlignedBuffer<uint8_t>>& pool, const KvBlockList& seq, int64_t layer, int64_t pos);
  int64_t n_layers_ = 0, n_kv_heads_ = 0, head_dim_ = 0, kv_dim_ = 0, num_pages_ = 0;
  DType dtype_ = DType::kBF16;
  std::vector<AlignedBuffer<uint8_t>> k_pool_, v_pool_;  // [layer] -> [num_pages][kPageTokens][kv_dim]
  std::vector<int32_t> free_;
  std::vector<QkvScales> scales_;
  bool scales_set_ = false;
};

}  // namespace fp8rl
