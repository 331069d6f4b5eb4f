// The GRPO loss: clipped policy gradient with importance-sampling correction for the
// generator/trainer mismatch, a KL penalty to the reference policy, and the mismatch metrics
// (docs/recipe.md section 7). Pure functions of per-token log-probs: no model here.
// The trainer calls grpo_loss() once per micro-batch, backpropagates from d(loss)/d(curr), and
// sums the returned losses and merges the metric sums over the micro-batches of the global batch.
//
// Notation. Sequence s has T_s response tokens t (only response tokens are passed) and advantage
// A_s. Per token: curr (trainer log-prob, the variable), prev (trainer log-prob under the weights
// that generated the rollout), gen (generator log-prob), ref (reference policy log-prob).
// N = global_num_tokens, S = global_num_sequences (of the GLOBAL batch, so micro-batch losses add
// up to the global loss exactly).
//
// Ratio, token level:        r_t = exp(curr_t - prev_t)
//        sequence level:     r_t = R_s = exp(mean_{u in s}(curr_u - prev_u))   (GSPO-style)
// Clipped term:              c_t = max(-A_s r_t, -A_s clip(r_t, 1 - eps_low, 1 + eps_high))
// Importance weight (detached; a non-finite value becomes 0):
//        token level:        w_t = exp(prev_t - gen_t)
//        sequence level:     w_t = W_s = exp(mean_{u in s}(prev_u - gen_u)), so that
//                            r_t * w_t = exp(mean_s(curr - gen)), GSPO's length-normalised ratio
//                            against the policy that actually sampled. (NeMo RL uses
//                            exp(sum_s(prev - gen)) here, which is not length-normalised.)
//   truncation, only when C = truncated_importance_sampling_ratio is set, bounds [min, C]:
//        tis:                w = clamp(w, min, C)
//        icepop:             w = 0 where w is outside [min, C] (tokens; whole sequences when the
//                            weight is sequence-level)
//        seq-mask-tis:       w_t = 0 for every token of a sequence whose geometric mean
//                            exp(mean_{u in s}(prev_u - gen_u)) is outside [min, C] (or is not
//                            finite: one non-finite token log-ratio masks its sequence); the
//                            kept sequences keep their raw token weights, untruncated (as in
//                            NeMo RL). Not combinable with sequence-level ratios (refused).
//        A non-finite log-ratio prev - gen (a NaN or infinite log-prob; also gen = +Inf, whose
//        exp(-Inf) would be a finite 0) or an exp that overflows gives w = 0 in every variant (never
//        the lower bound), and counts as out of bounds when truncation is on.
//   Without use_importance_sampling_correction the loss uses w = 1 (the metric still reports the
//   weight that would have been used).
// KL term:                   k_t = clamp(K(clamp(ref_t - curr_t, -20, 20)), -10, 10), with
//                            K = k1: -x,  k2: x^2 / 2,  k3: e^x - 1 - x
// Per-token loss:            l_t = w_t c_t + beta k_t       (w multiplies the policy term only)
// Aggregation:   token_level_loss:  loss = sum_t l_t / N
//                otherwise:         loss = sum_s (sum_{t in s} l_t / T_s) / S
//
// Gradient d(loss)/d(curr_u), with D_u = N (token level) or S * T_s (sequence mean):
//   clipped term: the max selects the unclipped branch when -A r >= -A clip(r) (also on ties, where
//     both branches have the same value and the same derivative); only that branch carries
//     gradient, -A. The clipped branch is selected strictly only when clip() is active, and an
//     active clip passes no gradient, so then dc/dr = 0.
//   token level:     dl/dcurr_u = (w_u dc_u/dr_u r_u + beta dk_u/dcurr_u) / D_u
//   sequence level:  R_s depends on every curr_u of s through the mean, dR_s/dcurr_u = R_s / T_s,
//     so every token of s receives the same policy gradient from all tokens of s:
//                    dl/dcurr_u = sum_{t in s} (w_t / D_t) dc/dR_s R_s / T_s + beta dk_u/dcurr_u / D_u
//   KL: dk/dcurr = -K'(x) with K' = k1: -1, k2: x, k3: e^x - 1, and 0 where either clamp is
//     active (clamps pass gradient on their closed interval, as torch.clamp does).
//   prev, gen, ref and the weights are constants (no gradient).
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp8rl {

enum class TruncatedIsType { kTis, kIcepop, kSeqMaskTis };  // "tis", "icepop", "seq-mask-tis"
enum class KlType { kK1, kK2, kK3 };                         // "k1", "k2", "k3"

// YAML names of the enums (for ConfigSchema::add_enum and for printing).
const std::vector<std::pair<std::string, TruncatedIsType>>& truncated_is_type_names();
const std::vector<std::pair<std::string, KlType>>& kl_type_names();
TruncatedIsType parse_truncated_is_type(std::string_view name);  // throws fp8rl::Error on others
KlType parse_kl_type(std::string_view name);                     // throws fp8rl::Error on others
std::string_view to_string(TruncatedIsType type);
std::string_view to_string(KlType type);

// Key names are NeMo RL's `loss_fn.*`.
struct GrpoLossConfig {
  double ratio_clip_min = 0.2;  // loss_fn.ratio_clip_min: eps_low, ratio clipped below at 1 - eps_low; [0, 1]
  double ratio_clip_max = 0.2;  // loss_fn.ratio_clip_max: eps_high, ratio clipped above at 1 + eps_high; >= 0
  bool use_importance_sampling_correction = false;  // loss_fn.use_importance_sampling_correction
  // loss_fn.truncated_importance_sampling_ratio: C, > 0; nullopt (YAML null) = no truncation.
  // Setting it requires use_importance_sampling_correction.
  std::optional<double> truncated_importance_sampling_ratio;
  // loss_fn.truncated_importance_sampling_ratio_min: lower bound, 0 <= min <= C. The default 0 is
  // "no lower bound" (weights are >= 0). Only meaningful with C set; a nonzero value without C is
  // refused rather than silently ignored.
  double truncated_importance_sampling_ratio_min = 0.0;
  TruncatedIsType truncated_importance_sampling_type = TruncatedIsType::kTis;  // loss_fn.truncated_importance_sampling_type
  bool sequence_level_importance_ratios = false;  // loss_fn.sequence_level_importance_ratios (GSPO)
  double reference_policy_kl_penalty = 0.01;      // loss_fn.reference_policy_kl_penalty: beta >= 0
  KlType reference_policy_kl_type = KlType::kK3;  // loss_fn.reference_policy_kl_type
  bool token_level_loss = true;                   // loss_fn.token_level_loss
};

// The clamps of the KL estimator (NeMo RL's kl_input_clamp_value / kl_output_clamp_value).
inline constexpr double kKlInputClamp = 20.0;
inline constexpr double kKlOutputClamp = 10.0;

// Throws fp8rl::Error naming the key if the configuration is inconsistent (call it at start-up).
void validate_grpo_loss_config(const GrpoLossConfig& config);

// One micro-batch, flat over its response tokens.
struct GrpoLossBatch {
  std::span<const float> curr;        // [T] trainer log-probs, the variable of the gradient
  std::span<const float> prev;        // [T] trainer log-probs of the rollout's weights
  std::span<const float> gen;         // [T] generator log-probs of the sampled tokens
  std::span<const float> ref;         // [T] reference log-probs; may be empty iff beta == 0
  std::span<const float> advantages;  // [num_seqs] one per sequence, finite
  std::span<const int64_t> offsets;   // [num_seqs + 1] sequence s = tokens [offsets[s], offsets[s+1]);
                                      // offsets[0] = 0, strictly increasing, offsets[num_seqs] = T
  int64_t global_num_tokens = 0;      // N: response tokens of the whole global batch (>= T)
  int64_t global_num_sequences = 0;   // S: sequences of the whole global batch (>= num_seqs)
};

// Sum and count of one mean metric: micro-batches merge by adding both, then divide once.
struct MeanSum {
  double sum = 0;
  int64_t count = 0;
  void add(double v) {
    sum += v;
    ++count;
  }
  void merge(const MeanSum& o) {
    sum += o.sum;
    count += o.count;
  }
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : std::numeric_limits<double>::quiet_NaN(); }
};

// The generator/trainer mismatch metrics, from (prev, gen) alone, d = prev - gen per token:
//   token_mult_prob_error = mean exp(|d|)          (1 = perfect agreement)
//   gen_kl_error          = mean (e^d - d - 1)
//   policy_kl_error       = mean (e^-d + d - 1)
//   js_divergence_error   = mean JS(P_t, Q_t), the Jensen-Shannon divergence (nats) of the
//       two-point distributions P_t = (p, 1 - p), Q_t = (q, 1 - q) with p = exp(prev),
//       q = exp(gen): "the sampled token" vs "any other token" under the trainer and the
//       generator: JS = 0.5 KL(P||M) + 0.5 KL(Q||M), M = (P + Q) / 2. It is symmetric, in
//       [0, ln 2], 0 iff p == q, and by the data-processing inequality a lower bound of the
//       full-vocabulary JS divergence at that position. Log-probs above 0 (rounding) count as 0.
// Tokens whose prev or gen is not finite are left out of these means (a single NaN would hide
// every other token) and counted in num_nonfinite instead.
// Response-length bins of token_mult_prob_error_by_length: 1-16, 17-32, 33-64, ..., 2049+ tokens
// (a sequence's tokens all go to the bin of its length), to show whether mismatch grows with it.
inline constexpr int kLengthBins = 9;
int length_bin(int64_t tokens);
std::string length_bin_name(int bin);

struct MismatchMetricSums {
  MeanSum token_mult_prob_error;
  std::array<MeanSum, kLengthBins> token_mult_prob_error_by_length;
  MeanSum gen_kl_error;
  MeanSum policy_kl_error;
  MeanSum js_divergence_error;
  int64_t num_nonfinite = 0;
  void merge(const MismatchMetricSums& o);
};

// prev, gen: [T]. Adds the tokens to `sums` (call once per micro-batch, or on a whole rollout
// when no loss is computed); with `offsets` ([num_seqs + 1], as GrpoLossBatch's) also to the
// length bins.
void accumulate_mismatch_metrics(std::span<const float> prev, std::span<const float> gen, MismatchMetricSums& sums,
                                 std::span<const int64_t> offsets = {});

// Final values of one step. Means are over the tokens of the global batch (NaN if none counted).
struct GrpoMetrics {
  double loss = 0;
  double token_mult_prob_error = 0, gen_kl_error = 0, policy_kl_error = 0, js_divergence_error = 0;
  std::array<double, kLengthBins> token_mult_prob_error_by_length{};  // NaN for bins without tokens
  double sampling_importance_ratio = 0;  // mean_t w as used (after truncation and masking; see above)
  double is_oob_ratio = 0;  // fraction of tokens whose raw weight is outside [min, C] (or non-finite);
                            // seq-mask-tis: tokens of masked sequences; 0 without truncation
  double probs_ratio = 0, probs_ratio_min = 0, probs_ratio_max = 0;  // r_t as used in c_t
  double probs_ratio_clamped = 0, probs_ratio_clamped_min = 0, probs_ratio_clamped_max = 0;  // clip(r_t)
  double probs_ratio_clamped_fraction = 0;  // tokens where the clipped branch wins (zero policy gradient)
  double kl_penalty = 0;      // mean_t k_t (clamped estimator, NOT multiplied by beta; 0 without ref)
  double approx_entropy = 0;  // mean_t -exp(curr - gen) curr: importance-weighted estimate of the
                              // current policy's entropy from generator samples (NeMo RL's)
  double num_tokens = 0, num_sequences = 0, num_nonfinite_logprobs = 0;
  // MoE models: the fraction of (token, MoE layer) routing decisions where the trainer's set of k
  // experts differs from the generator's (NaN for a dense model); see GrpoMetricSums::routing_*.
  double routing_mismatch = std::numeric_limits<double>::quiet_NaN();
  // MoE models: the load-balancing loss of the training forwards (model/moe_load_balance.h; k when
  // the load is uniform), whether or not policy.aux_loss_coef trains on it (NaN for a dense model).
  double moe_aux_loss = std::numeric_limits<double>::quiet_NaN();
};

// Raw sums of one or more micro-batches. merge() then finalize() gives the global values exactly.
struct GrpoMetricSums {
  double loss = 0;  // already divided by the global denominators: micro-batch losses simply add
  MismatchMetricSums mismatch;
  MeanSum sampling_importance_ratio, is_oob_ratio;
  MeanSum probs_ratio, probs_ratio_clamped, probs_ratio_clamped_fraction;
  MeanSum kl_penalty;
  MeanSum approx_entropy;  // over the tokens with finite prev and gen, like the mismatch metrics
  double probs_ratio_min = std::numeric_limits<double>::infinity();
  double probs_ratio_max = -std::numeric_limits<double>::infinity();
  double probs_ratio_clamped_min = std::numeric_limits<double>::infinity();
  double probs_ratio_clamped_max = -std::numeric_limits<double>::infinity();
  int64_t num_tokens = 0, num_sequences = 0;
  // MoE models: (token, MoE layer) decisions compared, and those whose sets of experts differ.
  int64_t routing_decisions = 0, routing_mismatched = 0;
  // MoE models: the sum of each micro-batch's load-balancing loss times its weight (its share of
  // its optimizer step's sequences), and the sum of the weights.
  double moe_aux_loss = 0, moe_aux_loss_weight = 0;
  void merge(const GrpoMetricSums& o);
  GrpoMetrics finalize() const;
};

// Every metric with its name as in recipe section 7 (the keys of metrics.jsonl), in a fixed order.
std::vector<std::pair<std::string, double>> named_metrics(const GrpoMetrics& m);

struct GrpoLossResult {
  double loss = 0;  // this micro-batch's share of the global loss
  GrpoMetricSums sums;
};

// Computes the loss of one micro-batch and writes d(loss)/d(curr) into grad_curr [T]
// (overwritten, not accumulated). Arithmetic in double; the gradient is rounded to float once.
// Throws fp8rl::Error on an invalid config or inconsistent sizes/offsets/denominators. Non-finite
// curr or prev are not errors: they make the loss non-finite, which the caller detects.
GrpoLossResult grpo_loss(const GrpoLossConfig& config, const GrpoLossBatch& batch, std::span<float> grad_curr);

}  // namespace fp8rl
