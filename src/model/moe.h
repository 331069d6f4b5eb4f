// The Mixture-of-Experts MLP of a Qwen3-MoE decoder layer, forward next to backward:
//
//   logits = h W_router^T                      FP32 (the router is never quantized)
//   routing = route_tokens(logits)             model/moe_routing.h: top k of E, fixed tie order
//   y[n] = sum_{j<k} w[n, j] * expert_{e(n, j)}(h[n])    in slot order, FP32, then rounded to BF16
//                                                         under BF16 activations
//   expert_e(x) = down_e(silu(gate_e(x)) * up_e(x))     linears in the policy's precision
//
// Tokens are grouped by expert (tokens ascending) and each expert runs one GEMM per linear over
// its tokens. Every kernel on a token's path is row-wise or batch invariant (the router GEMM, the
// 1x128 activation quantization, the expert GEMMs), so a token's router logits, experts and output
// do not depend on which other tokens share its batch or expert: the generator and the trainer
// route every token the same way by construction.
//
// Shapes: h, y, dh, dy [N, C]; C d_model, F d_expert (moe_intermediate_size), E experts, k per
// token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/aligned_buffer.h"
#include "model/linear.h"
#include "model/moe_routing.h"
#include "model/params.h"
#include "arch/precision.h"

namespace fp8rl {

struct MoeShape {
  int64_t d_model = 0;      // C
  int64_t d_expert = 0;     // F
  int64_t num_experts = 0;  // E
  int64_t top_k = 0;        // k
  bool norm_topk_prob = true;
};

// What one forward keeps for its backward (storage reused across calls).
struct MoeActs {
  AlignedBuffer<float> logits;  // [N, E]
  MoeRouting routing;
  ExpertGroups groups;
  AlignedBuffer<float> x;        // [N*k, C] the input rows in expert order
  AlignedBuffer<float> g, u, s;  // [N*k, F]
  AlignedBuffer<float> out;      // [N*k, C] each expert's output (the combine weights' gradient)
  LinearCache router;
  std::vector<LinearCache> gate, up, down;  // [E]
};

// Backward's gradient buffers, kept across calls and layers (sized by the largest batch).
struct MoeGradScratch {
  AlignedBuffer<float> dout, dx;  // [N*k, C]
  AlignedBuffer<float> ds, dg, du;  // [N*k, F]
  std::vector<float> dweight;     // [N, k]
  std::vector<float> dlogits;     // [N, E]
};

class MoeMlp {
 public:
  MoeMlp() = default;
  // The MLP of decoder layer `layer` of `n_layers`: its router's and experts' linears as
  // arch/spec.h declares them (moe_linears), each at its rule's precision (the router FP32).
  // `frozen`: Linear::frozen linears, zeroed, for a streaming loader to fill (a frozen model's).
  MoeMlp(int64_t layer, int64_t n_layers, const MoeShape& shape, const PrecisionPolicy& policy, bool frozen = false);
  // A copy holding only what forward() reads (Linear::frozen_copy of every linear).
  MoeMlp frozen_copy() const;

  const MoeShape& shape() const { return shape_; }
  // Remakes every linear's low-precision copy from the masters (kept by pointer for FP32).
  void refresh_weights(const MoeWeights& masters);
  // y [N, C] from h [N, C]; `acts` keeps the routing and what backward needs. `replay` [N, k]:
  // router replay's experts (route_tokens), or null.
  void forward(float* y, const float* h, int64_t N, MoeActs& acts, bool save_for_backward = true,
               const int32_t* replay = nullptr) const;
  // dh [N, C] (+)= the gradient of h given dy [N, C]; the weight gradients are added to `grads`
  // (one term per tensor, formed from zero; experts no token chose receive none; a null
  // grads.router, a frozen router's, receives nothing while the gradient still flows through the
  // routing weights to h). `dprobs` [N, E]: a gradient of the router's probabilities added (the
  // load-balancing loss's), or null.
  void backward(float* dh, bool accumulate_dh, const float* dy, const MoeActs& acts, const MoeWeights& grads,
                MoeGradScratch& scratch, const float* dprobs = nullptr) const;

  // The linears in order: router, then per expert gate, up, down.
  std::vector<const Linear*> linears() const;
  std::vector<Linear*> linears();
  // The router (kRouter) or expert `expert`'s kExpertGate, kExpertUp or kExpertDown.
  const Linear& linear(TensorRole role, int64_t expert) const;

 private:
  MoeShape shape_;
  bool bf16_activations_ = false;
  Linear router_;
  std::vector<Linear> gate_, up_, down_;
};

}  // namespace fp8rl
