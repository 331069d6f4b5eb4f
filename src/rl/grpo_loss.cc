#include "rl/grpo_loss.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace fp8rl {

// ---- enum names ----

const std::vector<std::pair<std::string, TruncatedIsType>>& truncated_is_type_names() {
  static const std::vector<std::pair<std::string, TruncatedIsType>> names = {
      {"tis", TruncatedIsType::kTis}, {"icepop", TruncatedIsType::kIcepop}, {"seq-mask-tis", TruncatedIsType::kSeqMaskTis}};
  return names;
}

const std::vector<std::pair<std::string, KlType>>& kl_type_names() {
  static const std::vector<std::pair<std::string, KlType>> names = {
      {"k1", KlType::kK1}, {"k2", KlType::kK2}, {"k3", KlType::kK3}};
  return names;
}

namespace {

template <typename E>
E parse_enum(const std::vector<std::pair<std::string, E>>& names, std::string_view name, const char* key) {
  std::string allowed;
  for (const auto& [n, e] : names) {
    if (n == name) return e;
    allowed += (allowed.empty() ? "" : ", ") + n;
  }
  FP8RL_CHECK(false, "{}: unknown value '{}', expected one of {}", key, name, allowed);
  return names.front().second;  // unreachable
}

template <typename E>
std::string_view enum_name(const std::vector<std::pair<std::string, E>>& names, E e) {
  for (const auto& [n, v] : names)
    if (v == e) return n;
  return "<invalid>";
}

}  // namespace

TruncatedIsType parse_truncated_is_type(std::string_view name) {
  return parse_enum(truncated_is_type_names(), name, "loss_fn.truncated_importance_sampling_type");
}
KlType parse_kl_type(std::string_view name) {
  return parse_enum(kl_type_names(), name, "loss_fn.reference_policy_kl_type");
}
std::string_view to_string(TruncatedIsType type) { return enum_name(truncated_is_type_names(), type); }
std::string_view to_string(KlType type) { return enum_name(kl_type_names(), type); }

// ---- configuration ----

void validate_grpo_loss_config(const GrpoLossConfig& c) {
  FP8RL_CHECK(std::isfinite(c.ratio_clip_min) && c.ratio_clip_min >= 0 && c.ratio_clip_min <= 1,
              "loss_fn.ratio_clip_min (eps_low) must be in [0, 1] so that 1 - eps_low >= 0, got {}", c.ratio_clip_min);
  FP8RL_CHECK(std::isfinite(c.ratio_clip_max) && c.ratio_clip_max >= 0,
              "loss_fn.ratio_clip_max (eps_high) must be finite and >= 0, got {}", c.ratio_clip_max);
  FP8RL_CHECK(std::isfinite(c.reference_policy_kl_penalty) && c.reference_policy_kl_penalty >= 0,
              "loss_fn.reference_policy_kl_penalty must be finite and >= 0, got {}", c.reference_policy_kl_penalty);
  FP8RL_CHECK(std::isfinite(c.truncated_importance_sampling_ratio_min) && c.truncated_importance_sampling_ratio_min >= 0,
              "loss_fn.truncated_importance_sampling_ratio_min must be finite and >= 0, got {}",
              c.truncated_importance_sampling_ratio_min);
  if (c.truncated_importance_sampling_ratio) {
    const double C = *c.truncated_importance_sampling_ratio;
    FP8RL_CHECK(std::isfinite(C) && C > 0, "loss_fn.truncated_importance_sampling_ratio must be finite and > 0, got {}",
                C);
    FP8RL_CHECK(c.truncated_importance_sampling_ratio_min <= C,
                "loss_fn.truncated_importance_sampling_ratio_min ({}) must not exceed "
                "loss_fn.truncated_importance_sampling_ratio ({})",
                c.truncated_importance_sampling_ratio_min, C);
    FP8RL_CHECK(c.use_importance_sampling_correction,
                "loss_fn.truncated_importance_sampling_ratio ({}) is set but "
                "loss_fn.use_importance_sampling_correction is false; enable the correction or set the ratio to null",
                C);
    FP8RL_CHECK(!(c.truncated_importance_sampling_type == TruncatedIsType::kSeqMaskTis &&
                  c.sequence_level_importance_ratios),
                "loss_fn.truncated_importance_sampling_type 'seq-mask-tis' masks sequences of token-level weights and "
                "cannot be combined with loss_fn.sequence_level_importance_ratios (use 'icepop', which then masks "
                "whole sequences)");
  } else {
    FP8RL_CHECK(c.truncated_importance_sampling_ratio_min == 0,
                "loss_fn.truncated_importance_sampling_ratio_min ({}) has no effect without "
                "loss_fn.truncated_importance_sampling_ratio (C); set C or remove the minimum",
                c.truncated_importance_sampling_ratio_min);
  }
}

// ---- metrics ----

namespace {

// x * ln(x / y) with the convention 0 * ln(0 / y) = 0.
double xlogxy(double x, double y) { return x > 0 ? x * std::log(x / y) : 0.0; }

// Jensen-Shannon divergence of the two-point distributions (p, 1-p) and (q, 1-q) given the
// log-probabilities lp, lq of the sampled token (clamped to <= 0). 1 - p = -expm1(lp) keeps the
// "other tokens" mass accurate when p is close to 1.
double js_two_point(double lp, double lq) {
  lp = std::min(lp, 0.0);
  lq = std::min(lq, 0.0);
  const double p = std::exp(lp), q = std::exp(lq);
  const double pc = -std::expm1(lp), qc = -std::expm1(lq);
  const double m = 0.5 * (p + q), mc = 0.5 * (pc + qc);
  return 0.5 * (xlogxy(p, m) + xlogxy(pc, mc)) + 0.5 * (xlogxy(q, m) + xlogxy(qc, mc));
}

}  // namespace

int length_bin(int64_t tokens) {
  int bin = 0;
  for (int64_t upper = 16; tokens > upper && bin + 1 < kLengthBins; upper *= 2) ++bin;
  return bin;
}

std::string length_bin_name(int bin) {
  const int64_t upper = int64_t{16} << bin;
  if (bin + 1 == kLengthBins) return fmt::format("{}+", upper / 2 + 1);
  return fmt::format("{}-{}", bin == 0 ? 1 : upper / 2 + 1, upper);
}

void MismatchMetricSums::merge(const MismatchMetricSums& o) {
  token_mult_prob_error.merge(o.token_mult_prob_error);
  for (int i = 0; i < kLengthBins; ++i) token_mult_prob_error_by_length[i].merge(o.token_mult_prob_error_by_length[i]);
  gen_kl_error.merge(o.gen_kl_error);
  policy_kl_error.merge(o.policy_kl_error);
  js_divergence_error.merge(o.js_divergence_error);
  num_nonfinite += o.num_nonfinite;
}

void accumulate_mismatch_metrics(std::span<const float> prev, std::span<const float> gen, MismatchMetricSums& sums,
                                 std::span<const int64_t> offsets) {
  FP8RL_CHECK(prev.size() == gen.size(), "accumulate_mismatch_metrics: {} prev log-probs but {} gen log-probs",
              prev.size(), gen.size());
  FP8RL_CHECK(offsets.empty() || (offsets.front() == 0 && offsets.back() == static_cast<int64_t>(prev.size())),
              "accumulate_mismatch_metrics: offsets do not cover the {} tokens", prev.size());
  size_t seq = 0;  // the sequence of token t, with offsets
  for (size_t t = 0; t < prev.size(); ++t) {
    while (!offsets.empty() && offsets[seq + 1] <= static_cast<int64_t>(t)) ++seq;
    if (!std::isfinite(prev[t]) || !std::isfinite(gen[t])) {
      ++sums.num_nonfinite;
      continue;
    }
    const double d = static_cast<double>(prev[t]) - gen[t];
    sums.token_mult_prob_error.add(std::exp(std::fabs(d)));
    if (!offsets.empty())
      sums.token_mult_prob_error_by_length[length_bin(offsets[seq + 1] - offsets[seq])].add(std::exp(std::fabs(d)));
    sums.gen_kl_error.add(std::expm1(d) - d);     // e^d - 1 - d
    sums.policy_kl_error.add(std::expm1(-d) + d);  // e^-d - 1 + d
    sums.js_divergence_error.add(js_two_point(prev[t], gen[t]));
  }
}

void GrpoMetricSums::merge(const GrpoMetricSums& o) {
  loss += o.loss;
  mismatch.merge(o.mismatch);
  sampling_importance_ratio.merge(o.sampling_importance_ratio);
  is_oob_ratio.merge(o.is_oob_ratio);
  probs_ratio.merge(o.probs_ratio);
  probs_ratio_clamped.merge(o.probs_ratio_clamped);
  probs_ratio_clamped_fraction.merge(o.probs_ratio_clamped_fraction);
  kl_penalty.merge(o.kl_penalty);
  approx_entropy.merge(o.approx_entropy);
  probs_ratio_min = std::min(probs_ratio_min, o.probs_ratio_min);
  probs_ratio_max = std::max(probs_ratio_max, o.probs_ratio_max);
  probs_ratio_clamped_min = std::min(probs_ratio_clamped_min, o.probs_ratio_clamped_min);
  probs_ratio_clamped_max = std::max(probs_ratio_clamped_max, o.probs_ratio_clamped_max);
  num_tokens += o.num_tokens;
  num_sequences += o.num_sequences;
  routing_decisions += o.routing_decisions;
  routing_mismatched += o.routing_mismatched;
  moe_aux_loss += o.moe_aux_loss;
  moe_aux_loss_weight += o.moe_aux_loss_weight;
}

GrpoMetrics GrpoMetricSums::finalize() const {
  GrpoMetrics m;
  m.loss = loss;
  m.token_mult_prob_error = mismatch.token_mult_prob_error.mean();
  for (int i = 0; i < kLengthBins; ++i) m.token_mult_prob_error_by_length[i] = mismatch.token_mult_prob_error_by_length[i].mean();
  m.gen_kl_error = mismatch.gen_kl_error.mean();
  m.policy_kl_error = mismatch.policy_kl_error.mean();
  m.js_divergence_error = mismatch.js_divergence_error.mean();
  m.sampling_importance_ratio = sampling_importance_ratio.mean();
  m.is_oob_ratio = is_oob_ratio.mean();
  m.probs_ratio = probs_ratio.mean();
  m.probs_ratio_min = probs_ratio_min;
  m.probs_ratio_max = probs_ratio_max;
  m.probs_ratio_clamped = probs_ratio_clamped.mean();
  m.probs_ratio_clamped_min = probs_ratio_clamped_min;
  m.probs_ratio_clamped_max = probs_ratio_clamped_max;
  m.probs_ratio_clamped_fraction = probs_ratio_clamped_fraction.mean();
  m.kl_penalty = kl_penalty.mean();
  m.approx_entropy = approx_entropy.mean();
  m.num_tokens = static_cast<double>(num_tokens);
  m.num_sequences = static_cast<double>(num_sequences);
  m.num_nonfinite_logprobs = static_cast<double>(mismatch.num_nonfinite);
  if (routing_decisions > 0)
    m.routing_mismatch = static_cast<double>(routing_mismatched) / static_cast<double>(routing_decisions);
  if (moe_aux_loss_weight > 0) m.moe_aux_loss = moe_aux_loss / moe_aux_loss_weight;
  return m;
}

std::vector<std::pair<std::string, double>> named_metrics(const GrpoMetrics& m) {
  return {{"loss", m.loss},
          {"token_mult_prob_error", m.token_mult_prob_error},
          {"gen_kl_error", m.gen_kl_error},
          {"policy_kl_error", m.policy_kl_error},
          {"js_divergence_error", m.js_divergence_error},
          {"sampling_importance_ratio", m.sampling_importance_ratio},
          {"is_oob_ratio", m.is_oob_ratio},
          {"probs_ratio", m.probs_ratio},
          {"probs_ratio_min", m.probs_ratio_min},
          {"probs_ratio_max", m.probs_ratio_max},
          {"probs_ratio_clamped", m.probs_ratio_clamped},
          {"probs_ratio_clamped_min", m.probs_ratio_clamped_min},
          {"probs_ratio_clamped_max", m.probs_ratio_clamped_max},
          {"probs_ratio_clamped_fraction", m.probs_ratio_clamped_fraction},
          {"kl_penalty", m.kl_penalty},
          {"approx_entropy", m.approx_entropy},
          {"num_tokens", m.num_tokens},
          {"num_sequences", m.num_sequences},
          {"num_nonfinite_logprobs", m.num_nonfinite_logprobs}};
}

// ---- the loss ----

namespace {

void check_batch(const GrpoLossConfig& config, const GrpoLossBatch& b, std::span<float> grad_curr) {
  const size_t T = b.curr.size();
  FP8RL_CHECK(b.prev.size() == T && b.gen.size() == T,
              "grpo_loss: per-token arrays differ in length: curr {}, prev {}, gen {}", T, b.prev.size(), b.gen.size());
  if (config.reference_policy_kl_penalty != 0 || !b.ref.empty())
    FP8RL_CHECK(b.ref.size() == T,
                "grpo_loss: {} reference log-probs for {} tokens (ref may be empty only when "
                "loss_fn.reference_policy_kl_penalty is 0, here {})",
                b.ref.size(), T, config.reference_policy_kl_penalty);
  FP8RL_CHECK(grad_curr.size() == T, "grpo_loss: gradient buffer holds {} values for {} tokens", grad_curr.size(), T);
  FP8RL_CHECK(!b.offsets.empty() && b.offsets[0] == 0, "grpo_loss: sequence offsets must start with 0 (got {})",
              b.offsets.empty() ? std::string("no offsets") : std::to_string(b.offsets[0]));
  const size_t S = b.offsets.size() - 1;
  FP8RL_CHECK(b.advantages.size() == S, "grpo_loss: {} advantages for {} sequences ({} offsets)", b.advantages.size(),
              S, b.offsets.size());
  for (size_t s = 0; s < S; ++s) {
    FP8RL_CHECK(b.offsets[s + 1] > b.offsets[s],
                "grpo_loss: sequence {} is empty or offsets decrease (offsets[{}] = {}, offsets[{}] = {}); every "
                "sequence needs at least one response token",
                s, s, b.offsets[s], s + 1, b.offsets[s + 1]);
    FP8RL_CHECK(std::isfinite(b.advantages[s]), "grpo_loss: advantage of sequence {} is {}", s, b.advantages[s]);
  }
  FP8RL_CHECK(b.offsets[S] == static_cast<int64_t>(T), "grpo_loss: the last offset is {} but there are {} tokens",
              b.offsets[S], T);
  if (T > 0) {
    FP8RL_CHECK(b.global_num_tokens >= static_cast<int64_t>(T),
                "grpo_loss: global_num_tokens ({}) is smaller than this micro-batch's {} tokens; pass the valid "
                "tokens of the whole global batch",
                b.global_num_tokens, T);
    FP8RL_CHECK(b.global_num_sequences >= static_cast<int64_t>(S),
                "grpo_loss: global_num_sequences ({}) is smaller than this micro-batch's {} sequences; pass the "
                "sequences of the whole global batch",
                b.global_num_sequences, S);
  }
}

// KL estimator K(x), x = ref - curr, with both clamps; *dk_dcurr receives dk/dcurr.
double kl_term(KlType type, double x, double* dk_dcurr) {
  const bool in_pass = x >= -kKlInputClamp && x <= kKlInputClamp;
  const double xc = std::clamp(x, -kKlInputClamp, kKlInputClamp);  // NaN stays NaN
  double k = 0, dk_dx = 0;
  switch (type) {
    case KlType::kK1:  // K = -x, K' = -1
      k = -xc;
      dk_dx = -1.0;
      break;
    case KlType::kK2:  // K = x^2 / 2, K' = x
      k = 0.5 * xc * xc;
      dk_dx = xc;
      break;
    case KlType::kK3:  // K = e^x - 1 - x, K' = e^x - 1
      k = std::expm1(xc) - xc;
      dk_dx = std::expm1(xc);
      break;
  }
  const bool out_pass = k >= -kKlOutputClamp && k <= kKlOutputClamp;
  const double kc = std::clamp(k, -kKlOutputClamp, kKlOutputClamp);
  // dx/dcurr = -1; a clamp that is active passes no gradient.
  *dk_dcurr = (in_pass && out_pass) ? -dk_dx : 0.0;
  if (std::isnan(x)) *dk_dcurr = x;
  return kc;
}

bool inside(double w, double lo, double hi) { return w >= lo && w <= hi; }  // false for NaN

}  // namespace

GrpoLossResult grpo_loss(const GrpoLossConfig& config, const GrpoLossBatch& b, std::span<float> grad_curr) {
  validate_grpo_loss_config(config);
  check_batch(config, b, grad_curr);
  const int64_t S = static_cast<int64_t>(b.offsets.size()) - 1;
  const double beta = config.reference_policy_kl_penalty;
  const bool have_ref = !b.ref.empty();
  const bool seq_level = config.sequence_level_importance_ratios;
  const bool truncate = config.truncated_importance_sampling_ratio.has_value();
  const double c_max = truncate ? *config.truncated_importance_sampling_ratio : 0.0;
  const double c_min = config.truncated_importance_sampling_ratio_min;
  const double clip_lo = 1.0 - config.ratio_clip_min, clip_hi = 1.0 + config.ratio_clip_max;

  GrpoLossResult result;
  GrpoMetricSums& m = result.sums;
  accumulate_mismatch_metrics(b.prev, b.gen, m.mismatch, b.offsets);
  m.num_tokens = static_cast<int64_t>(b.curr.size());
  m.num_sequences = S;

  std::vector<double> w;    // [T_s] importance weights of the current sequence
  std::vector<uint8_t> oob;  // [T_s] raw weight outside the truncation bounds
  std::vector<double> g;     // [T_s] per-token gradient before the division by D_t
  for (int64_t s = 0; s < S; ++s) {
    const int64_t t0 = b.offsets[s], t1 = b.offsets[s + 1];
    const int64_t Ts = t1 - t0;
    const double A = b.advantages[s];
    // D_t: the denominator of every token of s (see the header).
    const double inv_denom =
        config.token_level_loss ? 1.0 / static_cast<double>(b.global_num_tokens)
                                : 1.0 / (static_cast<double>(b.global_num_sequences) * static_cast<double>(Ts));

    // Means over the sequence of the log-ratios, for the sequence-level ratio and weight.
    double mean_curr_prev = 0, mean_prev_gen = 0;
    for (int64_t t = t0; t < t1; ++t) {
      mean_curr_prev += static_cast<double>(b.curr[t]) - b.prev[t];
      mean_prev_gen += static_cast<double>(b.prev[t]) - b.gen[t];
    }
    mean_curr_prev /= static_cast<double>(Ts);
    mean_prev_gen /= static_cast<double>(Ts);

    // ---- importance weights w_t (detached) ----
    w.assign(static_cast<size_t>(Ts), 0.0);
    oob.assign(static_cast<size_t>(Ts), 0);
    // seq-mask-tis: the geometric-mean ratio exp(mean(prev - gen)) decides for the whole sequence.
    const double geo_mean = std::exp(mean_prev_gen);
    const bool seq_masked = truncate && config.truncated_importance_sampling_type == TruncatedIsType::kSeqMaskTis &&
                            !(std::isfinite(mean_prev_gen) && inside(geo_mean, c_min, c_max));
    for (int64_t i = 0; i < Ts; ++i) {
      const int64_t t = t0 + i;
      // Raw weight: per token exp(prev - gen), or per sequence exp(mean_s(prev - gen)). A non-finite
      // log-ratio (a NaN or infinite log-prob, even gen = +Inf whose exp is a finite 0) or an
      // overflowing exp gives weight 0.
      const double log_raw = seq_level ? mean_prev_gen : static_cast<double>(b.prev[t]) - b.gen[t];
      const double raw = std::exp(log_raw);
      const bool finite = std::isfinite(log_raw) && std::isfinite(raw);
      double wt = finite ? raw : 0.0;
      bool out = false;
      if (truncate) {
        switch (config.truncated_importance_sampling_type) {
          case TruncatedIsType::kTis:  // clamp to [min, C]
            out = !finite || !inside(raw, c_min, c_max);
            if (finite) wt = std::clamp(raw, c_min, c_max);
            break;
          case TruncatedIsType::kIcepop:  // zero outside [min, C]
            out = !finite || !inside(raw, c_min, c_max);
            if (out) wt = 0.0;
            break;
          case TruncatedIsType::kSeqMaskTis:  // zero the whole sequence, keep raw token weights
            out = seq_masked;
            if (out) wt = 0.0;
            break;
        }
      }
      w[i] = wt;
      oob[i] = out;
    }

    // ---- ratio, clipped term, KL; g[i] = D_t * d(loss)/d(curr_t) ----
    g.assign(static_cast<size_t>(Ts), 0.0);
    const double R = std::exp(mean_curr_prev);  // sequence level: one ratio R_s for all tokens of s
    double seq_policy_grad = 0;                 // sequence level: sum_t a_t dc/dR dR/dcurr_u
    for (int64_t i = 0; i < Ts; ++i) {
      const int64_t t = t0 + i;
      const double r = seq_level ? R : std::exp(static_cast<double>(b.curr[t]) - b.prev[t]);
      const double rc = std::clamp(r, clip_lo, clip_hi);
      const double unclipped = -A * r, clipped = -A * rc;
      // c = max(unclipped, clipped); ties (and NaN) select the unclipped branch, see the header.
      const bool take_clipped = clipped > unclipped;
      const double c = take_clipped ? clipped : unclipped;
      const double dc_dr = take_clipped ? 0.0 : -A;
      const double a = config.use_importance_sampling_correction ? w[i] : 1.0;  // weight applied

      double dk_dcurr = 0, k = 0;
      if (have_ref) k = kl_term(config.reference_policy_kl_type, static_cast<double>(b.ref[t]) - b.curr[t], &dk_dcurr);

      result.loss += (a * c + beta * k) * inv_denom;  // l_t / D_t
      g[i] = beta * dk_dcurr;
      if (seq_level)
        seq_policy_grad += a * dc_dr * R / static_cast<double>(Ts);  // dR_s/dcurr_u = R_s / T_s for every u in s
      else
        g[i] += a * dc_dr * r;  // dr_t/dcurr_t = r_t

      m.sampling_importance_ratio.add(w[i]);
      m.is_oob_ratio.add(oob[i] ? 1.0 : 0.0);
      m.probs_ratio.add(r);
      m.probs_ratio_clamped.add(rc);
      m.probs_ratio_clamped_fraction.add(take_clipped ? 1.0 : 0.0);
      m.probs_ratio_min = std::min(m.probs_ratio_min, r);
      m.probs_ratio_max = std::max(m.probs_ratio_max, r);
      m.probs_ratio_clamped_min = std::min(m.probs_ratio_clamped_min, rc);
      m.probs_ratio_clamped_max = std::max(m.probs_ratio_clamped_max, rc);
      m.kl_penalty.add(k);
      if (std::isfinite(b.prev[t]) && std::isfinite(b.gen[t]))  // same token set as the mismatch metrics
        m.approx_entropy.add(-std::exp(static_cast<double>(b.curr[t]) - b.gen[t]) * b.curr[t]);
    }
    for (int64_t i = 0; i < Ts; ++i) grad_curr[t0 + i] = static_cast<float>((g[i] + seq_policy_grad) * inv_denom);
  }
  m.loss = result.loss;
  return result;
}

}  // namespace fp8rl
