#include "generation/kv_cache.h"

#include <cmath>
#include <cstring>

#include "core/check.h"
#include "numerics/e4m3.h"

namespace fp8rl {

const char* kv_dtype_name(DType d) { return d == DType::kE4M3 ? "fp8" : "bf16"; }


KvCache::KvCache(int64_t n_layers, int64_t n_kv_heads, int64_t head_dim, DType dtype, int64_t budget_bytes)
    : n_layers_(n_layers), n_kv_heads_(n_kv_heads), head_dim_(head_dim), kv_dim_(n_kv_heads * head_dim), dtype_(dtype) {
  const int64_t page_bytes = bytes_per_token() * kPageTokens;
  num_pages_ = budget_bytes / page_bytes;
  FP8RL_REQUIRE(num_pages_ >= 1,
                "the KV cache budget (generation.kv_cache_bytes) of {} bytes holds no page of {} tokens ({} bytes per "
                "page)",
                budget_bytes, kPageTokens, page_bytes);
  const size_t pool = static_cast<size_t>(num_pages_ * kPageTokens * kv_dim_ * element_bytes());
  for (int64_t l = 0; l < n_layers_; ++l) {
    k_pool_.emplace_back(pool);
    v_pool_.emplace_back(pool);
  }
  for (int64_t p = num_pages_ - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
  scales_.assign(static_cast<size_t>(n_layers_), QkvScales{});
}

void KvCache::release_memory() {
  FP8RL_CHECK(static_cast<int64_t>(free_.size()) == num_pages_, "KV cache: release_memory with {} of {} pages in use",
              num_pages_ - static_cast<int64_t>(free_.size()), num_pages_);
  for (auto* pools : {&k_pool_, &v_pool_})
    for (AlignedBuffer<uint8_t>& pool : *pools) pool = AlignedBuffer<uint8_t>(pool.size());
  free_.clear();
  for (int64_t p = num_pages_ - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));  // low pages first again
}

int64_t KvCache::storage_bytes() const {
  int64_t scale_floats = 0;  // 3 per layer, plus 3 per KV head with per-head scales
  if (dtype_ == DType::kE4M3)
    for (const QkvScales& s : scales_) scale_floats += 3 + static_cast<int64_t>(s.q_heads.size() + s.k_heads.size() + s.v_heads.size());
  return num_pages_ * kPageTokens * bytes_per_token() + scale_floats * static_cast<int64_t>(sizeof(float));
}

bool KvCache::reserve(KvBlockList& seq, int64_t tokens) {
  const int64_t have = static_cast<int64_t>(seq.pages.size()) * kPageTokens;
  const int64_t need_pages = (seq.tokens + tokens - have + kPageTokens - 1) / kPageTokens;
  if (need_pages <= 0) return true;
  if (need_pages > free_pages()) return false;
  for (int64_t i = 0; i < need_pages; ++i) {
    seq.pages.push_back(free_.back());
    free_.pop_back();
  }
  return true;
}

void KvCache::release(KvBlockList& seq) {
  for (int32_t p : seq.pages) free_.push_back(p);
  seq.pages.clear();
  seq.tokens = 0;
}

uint8_t* KvCache::row(std::vector<AlignedBuffer<uint8_t>>& pool, const KvBlockList& seq, int64_t layer, int64_t pos) {
  FP8RL_CHECK(pos >= 0 && pos / kPageTokens < static_cast<int64_t>(seq.pages.size()),
              "KV cache: position {} beyond the sequence's {} reserved pages", pos, seq.pages.size());
  const int64_t page = seq.pages[static_cast<size_t>(pos / kPageTokens)];
  return pool[static_cast<size_t>(layer)].data() + ((page * kPageTokens + pos % kPageTokens) * kv_dim_) * element_bytes();
}

const uint8_t* KvCache::k_row(const KvBlockList& seq, int64_t layer, int64_t pos) const {
  return const_cast<KvCache*>(this)->row(const_cast<KvCache*>(this)->k_pool_, seq, layer, pos);
}
const uint8_t* KvCache::v_row(const KvBlockList& seq, int64_t layer, int64_t pos) const {
  return const_cast<KvCache*>(this)->row(const_cast<KvCache*>(this)->v_pool_, seq, layer, pos);
}

void KvCache::append_runs(const KvBlockList& seq, int64_t layer, int64_t tokens, int64_t offset,
                          std::vector<AttentionRows>& runs) const {
  for (int64_t j0 = 0; j0 < tokens; j0 += kPageTokens)
    runs.push_back({k_row(seq, layer, j0) + offset * element_bytes(), v_row(seq, layer, j0) + offset * element_bytes(),
                    std::min(kPageTokens, tokens - j0)});
}

void KvCache::write(const KvBlockList& seq, int64_t layer, int64_t pos, const float* k, const float* v) {
  uint8_t* kd = row(k_pool_, seq, layer, pos);
  uint8_t* vd = row(v_pool_, seq, layer, pos);
  if (dtype_ == DType::kBF16) {
    auto* kh = reinterpret_cast<bf16_t*>(kd);
    auto* vh = reinterpret_cast<bf16_t*>(vd);
    for (int64_t i = 0; i < kv_dim_; ++i) {
      kh[i] = f32_to_bf16(k[i]);  // exact: K and V are BF16 values already
      vh[i] = f32_to_bf16(v[i]);
    }
    return;
  }
  FP8RL_CHECK(scales_set_, "FP8 KV cache written before its scales were set for this step (refit must set them)");
  const QkvScales& s = scales_[static_cast<size_t>(layer)];
  for (int64_t h = 0; h < n_kv_heads_; ++h) {
    const float ks = s.k_of(h), vs = s.v_of(h);
    for (int64_t i = h * head_dim_; i < (h + 1) * head_dim_; ++i) {
      kd[i] = f32_to_e4m3(k[i] / ks);
      vd[i] = f32_to_e4m3(v[i] / vs);
    }
  }
}

void KvCache::set_scales(const std::vector<QkvScales>& scales, bool need_q) {
  FP8RL_CHECK(static_cast<int64_t>(scales.size()) == n_layers_, "KV scales: got {} layers, the model has {}",
              scales.size(), n_layers_);
  auto ok = [](float x) { return std::isfinite(x) && x > 0.0f; };
  for (size_t l = 0; l < scales.size(); ++l) {
    const QkvScales& s = scales[l];
    FP8RL_CHECK(ok(s.k) && ok(s.v) && (!need_q || ok(s.q)),
                "KV scales of layer {} must be finite and > 0: q_scale {}, k_scale {}, v_scale {}", l, s.q, s.k, s.v);
    if (s.q_heads.empty() && s.k_heads.empty() && s.v_heads.empty()) continue;
    const auto n = static_cast<size_t>(n_kv_heads_);
    FP8RL_CHECK(s.k_heads.size() == n && s.v_heads.size() == n && (s.q_heads.size() == n || (!need_q && s.q_heads.empty())),
                "per-head KV scales of layer {}: {} q, {} k, {} v scales, expected one per KV head ({})", l,
                s.q_heads.size(), s.k_heads.size(), s.v_heads.size(), n_kv_heads_);
    for (size_t h = 0; h < n; ++h)
      FP8RL_CHECK(ok(s.k_heads[h]) && ok(s.v_heads[h]) && (!need_q || ok(s.q_heads[h])),
                  "KV scales of layer {}, KV head {} must be finite and > 0: q_scale {}, k_scale {}, v_scale {}", l, h,
                  s.q_heads.empty() ? 0.0f : s.q_heads[h], s.k_heads[h], s.v_heads[h]);
  }
  scales_ = scales;
  scales_set_ = true;
}

}  // namespace fp8rl
