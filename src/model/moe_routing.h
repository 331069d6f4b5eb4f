// The router of a Mixture-of-Experts layer (Qwen3-MoE), forward next to backward: which k of the
// E experts each token goes to and with what weight. Scalar FP32 code with a fixed order of
// operations, so that every caller (trainer, generator, any ISA level) routes a token the same way
// from the same logits.
//
//   p      = softmax(logits)                     FP32, exp_f32, sums in expert order
//   slot j = the j-th largest p, best first      ties: the lower expert index first
//   w_j    = p_j / sum_{i<k} p_i                 with norm_topk_prob (the sum in slot order),
//            p_j                                 without
//
// Router replay (policy.router_replay) gives a token its experts instead: the slots take them in
// the order given, and their weights are the same function of p (the router still gets gradients
// through them).
//
// Shapes: logits, probs, dlogits [N, E]; expert, weight, dweight, replay [N, k] (row n, slot j).
#pragma once

#include <cstdint>
#include <vector>

namespace fp8rl {

struct MoeRouting {
  int64_t N = 0, E = 0, k = 0;
  bool norm_topk_prob = true;
  std::vector<float> probs;     // [N, E] the router's softmax
  std::vector<int32_t> expert;  // [N, k] slot j's expert of token n
  std::vector<float> weight;    // [N, k] its combine weight
  // With replay: the router's own top k of every token, the experts it would have chosen
  // ([N, k]); empty otherwise (then it is `expert`).
  std::vector<int32_t> router_expert;
  const std::vector<int32_t>& router_choice() const { return router_expert.empty() ? expert : router_expert; }
};

// Routes N tokens from their router logits into `out` (its storage reused). With `replay`
// [N, k]: token n takes experts replay[n * k ..] where replay[n * k] >= 0 (k distinct experts
// of [0, E), checked), its own top k where it is -1.
void route_tokens(const float* logits, int64_t N, int64_t E, int64_t k, bool norm_topk_prob, MoeRouting& out,
                  const int32_t* replay = nullptr);

// dlogits [N, E] (overwritten): the gradient of the logits given dweight [N, k], the gradient of
// the combine weights, and `dprobs` [N, E], a gradient of the probabilities themselves (the
// load-balancing loss's, moe_load_balance.h), or null. (The top-k choice is piecewise constant:
// no gradient flows through it.)
void route_backward(float* dlogits, const float* dweight, const MoeRouting& routing, const float* dprobs = nullptr);

// The (token, slot) pairs of a routing grouped by expert: expert e's pairs are
// [begin[e], begin[e + 1]), tokens ascending. Each expert then runs once over its tokens.
struct ExpertGroups {
  std::vector<int64_t> begin;  // [E + 1]
  std::vector<int32_t> token;  // [N * k]
  std::vector<int32_t> slot;   // [N * k]
  // row_of[n * k + j]: the pair's place in token / slot (where expert row n, slot j is).
  std::vector<int32_t> row_of;
};
void group_by_expert(const MoeRouting& routing, ExpertGroups& out);

// x_grouped [N*k, C]: row r is h's row groups.token[r] (each expert's input rows, contiguous).
void gather_expert_inputs(float* x_grouped, const float* h, const ExpertGroups& groups, int64_t C);
// y [N, C] = sum over slots j, in slot order from zero in FP32, of weight[n, j] times the expert
// output of (n, j) (row groups.row_of[n * k + j] of out [N*k, C]). Shared by the trainer and the
// generator, so both combine with the same bits.
void combine_expert_outputs(float* y, const float* out, const MoeRouting& routing, const ExpertGroups& groups,
                            int64_t C);

}  // namespace fp8rl
