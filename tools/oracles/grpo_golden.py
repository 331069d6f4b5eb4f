#!/usr/bin/python3
"""Golden values for fp8rl's GRPO advantages, loss, loss gradient and metrics (NumPy only).

An independent implementation written from docs/recipe.md section 7 and the definitions
stated in src/rl/advantages.h and src/rl/grpo_loss.h (the choices the recipe leaves open), not
from fp8rl's C++. Everything is computed in float64 on padded [sequences, max_len] arrays with
masks (the C++ walks flat per-sequence offsets), and the gradient d(loss)/d(curr) is NOT derived
analytically here: it is a 4-point central finite difference of this script's own loss,
    f'(x) ~ (-f(x+2h) + 8 f(x+h) - 8 f(x-h) + f(x-2h)) / 12h,   h = 1e-4,
whose truncation error is O(h^4) ~ 1e-16 and rounding error ~ 1.5 eps |loss| / h ~ 1e-11. The
script checks the same difference at h/2 and refuses (exit 1) if they disagree by more than 1e-9,
which would mean a kink (clip boundary, clamp, branch switch) lies within 2h of an input.

Inputs are float32 values (what the engine holds), written exactly into the JSON.

Usage (run by tests/rl/grpo_golden_test.cc with Debian's /usr/bin/python3):
    grpo_golden.py OUT.json
"""
import json
import sys

import numpy as np

ADV_STD_EPS = 1e-6
KL_IN_CLAMP = 20.0
KL_OUT_CLAMP = 10.0


# ------------------------------------------------------------------------------------------------
# Advantages (recipe section 7, rules of src/rl/advantages.h)
# ------------------------------------------------------------------------------------------------

def group_advantages(rewards, group_size, leave_one_out, normalize):
    rewards = np.asarray(rewards, dtype=np.float64)
    groups = rewards.reshape(-1, group_size)
    out = np.zeros_like(groups)
    for g, row in enumerate(groups):
        if group_size == 1 or np.unique(row).size == 1:
            continue  # one response, or all rewards equal: no relative signal, advantage 0
        for i in range(group_size):
            baseline_set = np.concatenate([row[:i], row[i + 1:]]) if leave_one_out else row
            adv = row[i] - np.mean(baseline_set)
            # Population std (ddof=0) of the baseline set; a constant set (zero std) leaves the
            # advantage unnormalised instead of dividing by 1e-6.
            if normalize and np.unique(baseline_set).size > 1:
                adv = adv / (np.std(baseline_set, ddof=0) + ADV_STD_EPS)
            out[g, i] = adv
    return out.ravel()


# ------------------------------------------------------------------------------------------------
# Loss
# ------------------------------------------------------------------------------------------------

DEFAULT_CONFIG = {
    "ratio_clip_min": 0.2,
    "ratio_clip_max": 0.2,
    "use_importance_sampling_correction": False,
    "truncated_importance_sampling_ratio": None,
    "truncated_importance_sampling_ratio_min": 0.0,
    "truncated_importance_sampling_type": "tis",
    "sequence_level_importance_ratios": False,
    "reference_policy_kl_penalty": 0.01,
    "reference_policy_kl_type": "k3",
    "token_level_loss": True,
}


class Padded:
    """A flat token batch laid out as [S, L] with a validity mask."""

    def __init__(self, offsets):
        self.offsets = np.asarray(offsets)
        self.lengths = np.diff(self.offsets)
        self.S = len(self.lengths)
        self.L = int(self.lengths.max())
        self.mask = np.arange(self.L)[None, :] < self.lengths[:, None]
        self.rows, self.cols = np.nonzero(self.mask)  # row-major: matches the flat order

    def pad(self, flat, fill=0.0):
        out = np.full((self.S, self.L), fill, dtype=np.float64)
        out[self.rows, self.cols] = flat
        return out

    def seq_mean(self, x):
        """mean over each sequence's valid positions -> [S, 1]"""
        return (np.where(self.mask, x, 0.0).sum(axis=1) / self.lengths)[:, None]

    def flat(self, x):
        return np.broadcast_to(x, (self.S, self.L))[self.mask]


def kl_estimator(kind, x):
    if kind == "k1":
        return -x
    if kind == "k2":
        return 0.5 * x * x
    if kind == "k3":
        return np.exp(x) - 1.0 - x
    raise ValueError(kind)


def importance_weights(cfg, pb, prev, gen):
    """Detached weights [S, L] (as used when the correction is on) and out-of-bounds flags."""
    with np.errstate(invalid="ignore", over="ignore"):
        log_w = prev - gen                                            # [S, L]
        if cfg["sequence_level_importance_ratios"]:
            log_w = np.broadcast_to(pb.seq_mean(log_w), (pb.S, pb.L))  # log of the geometric mean
        raw = np.exp(log_w)
    # A non-finite log-ratio (gen = +Inf gives exp(-Inf) = 0, still untrusted) or exp -> weight 0
    finite = np.isfinite(log_w) & np.isfinite(raw)
    w = np.where(finite, raw, 0.0)
    oob = np.zeros((pb.S, pb.L), dtype=bool)
    C = cfg["truncated_importance_sampling_ratio"]
    if C is not None:
        lo = cfg["truncated_importance_sampling_ratio_min"]
        with np.errstate(invalid="ignore"):
            in_bounds = finite & (raw >= lo) & (raw <= C)
        kind = cfg["truncated_importance_sampling_type"]
        if kind == "tis":
            w = np.where(finite, np.clip(raw, lo, C), 0.0)
            oob = ~in_bounds
        elif kind == "icepop":
            w = np.where(in_bounds, raw, 0.0)
            oob = ~in_bounds
        elif kind == "seq-mask-tis":
            with np.errstate(invalid="ignore", over="ignore"):
                mean_log = pb.seq_mean(log_w)                         # [S, 1]
                geo = np.exp(mean_log)
                keep = np.isfinite(mean_log) & (geo >= lo) & (geo <= C)
            keep = np.broadcast_to(keep, (pb.S, pb.L))
            w = np.where(keep, w, 0.0)
            oob = ~keep
        else:
            raise ValueError(kind)
    return w, oob


def loss_and_parts(cfg, pb, curr_flat, prev, gen, ref, adv, n_global, s_global):
    curr = pb.pad(curr_flat)
    A = np.asarray(adv, dtype=np.float64)[:, None]
    if cfg["sequence_level_importance_ratios"]:
        ratio = np.broadcast_to(np.exp(pb.seq_mean(curr - prev)), (pb.S, pb.L))
    else:
        ratio = np.exp(curr - prev)
    ratio_clipped = np.clip(ratio, 1.0 - cfg["ratio_clip_min"], 1.0 + cfg["ratio_clip_max"])
    policy = np.maximum(-A * ratio, -A * ratio_clipped)
    w, oob = importance_weights(cfg, pb, prev, gen)
    applied = w if cfg["use_importance_sampling_correction"] else np.ones_like(w)
    if ref is None:
        kl = np.zeros_like(curr)
    else:
        x = np.clip(ref - curr, -KL_IN_CLAMP, KL_IN_CLAMP)
        kl = np.clip(kl_estimator(cfg["reference_policy_kl_type"], x), -KL_OUT_CLAMP, KL_OUT_CLAMP)
    per_token = applied * policy + cfg["reference_policy_kl_penalty"] * kl
    per_token = np.where(pb.mask, per_token, 0.0)
    if cfg["token_level_loss"]:
        loss = per_token.sum() / n_global
    else:
        loss = (per_token.sum(axis=1) / pb.lengths).sum() / s_global
    parts = dict(ratio=ratio, ratio_clipped=ratio_clipped, clipped_wins=(-A * ratio_clipped > -A * ratio),
                 w=w, oob=oob, kl=kl)
    return loss, parts


def js_two_point(lp, lq):
    """JS divergence (nats) of Bernoulli(p) and Bernoulli(q): the sampled token vs the rest."""
    p = np.exp(np.minimum(lp, 0.0))
    q = np.exp(np.minimum(lq, 0.0))
    P = np.stack([p, 1.0 - p])
    Q = np.stack([q, 1.0 - q])
    M = 0.5 * (P + Q)

    def kl(X, Y):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(X > 0, X * np.log(X / Y), 0.0).sum(axis=0)

    return 0.5 * kl(P, M) + 0.5 * kl(Q, M)


def mismatch_metrics(prev_flat, gen_flat):
    prev = np.asarray(prev_flat, dtype=np.float64)
    gen = np.asarray(gen_flat, dtype=np.float64)
    ok = np.isfinite(prev) & np.isfinite(gen)
    d = prev[ok] - gen[ok]
    return {
        "token_mult_prob_error": np.mean(np.exp(np.abs(d))),
        "gen_kl_error": np.mean(np.exp(d) - d - 1.0),
        "policy_kl_error": np.mean(np.exp(-d) + d - 1.0),
        "js_divergence_error": np.mean(js_two_point(prev[ok], gen[ok])),
        "num_nonfinite_logprobs": float(np.count_nonzero(~ok)),
    }


def fd_gradient(f, x, h):
    g = np.zeros_like(x)
    for i in range(len(x)):
        def at(delta):
            y = x.copy()
            y[i] += delta
            return f(y)
        g[i] = (-at(2 * h) + 8 * at(h) - 8 * at(-h) + at(-2 * h)) / (12 * h)
    return g


def solve_loss_case(case):
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(case["config"])
    pb = Padded(case["offsets"])
    curr = np.asarray(case["curr"], dtype=np.float64)
    prev = pb.pad(case["prev"])
    gen = pb.pad(case["gen"])
    ref = pb.pad(case["ref"]) if len(case["ref"]) else None
    adv = case["advantages"]
    n_global, s_global = case["global_num_tokens"], case["global_num_sequences"]

    def f(c):
        return loss_and_parts(cfg, pb, c, prev, gen, ref, adv, n_global, s_global)[0]

    loss, parts = loss_and_parts(cfg, pb, curr, prev, gen, ref, adv, n_global, s_global)
    grad = fd_gradient(f, curr, 1e-4)
    grad_half = fd_gradient(f, curr, 0.5e-4)
    worst = np.max(np.abs(grad - grad_half))
    if worst > 1e-9:
        raise SystemExit(f"case {case['name']}: finite differences disagree by {worst:.3g} "
                         f"(token {int(np.argmax(np.abs(grad - grad_half)))}): an input lies on a kink; move it")

    metrics = mismatch_metrics(case["prev"], case["gen"])
    ratio = pb.flat(parts["ratio"])
    ratio_clipped = pb.flat(parts["ratio_clipped"])
    prev_f = np.asarray(case["prev"], dtype=np.float64)
    gen_f = np.asarray(case["gen"], dtype=np.float64)
    ok = np.isfinite(prev_f) & np.isfinite(gen_f)
    metrics.update({
        "loss": loss,
        "sampling_importance_ratio": np.mean(pb.flat(parts["w"])),
        "is_oob_ratio": np.mean(pb.flat(parts["oob"]).astype(np.float64)),
        "probs_ratio": np.mean(ratio),
        "probs_ratio_min": np.min(ratio),
        "probs_ratio_max": np.max(ratio),
        "probs_ratio_clamped": np.mean(ratio_clipped),
        "probs_ratio_clamped_min": np.min(ratio_clipped),
        "probs_ratio_clamped_max": np.max(ratio_clipped),
        "probs_ratio_clamped_fraction": np.mean(pb.flat(parts["clipped_wins"]).astype(np.float64)),
        "kl_penalty": np.mean(pb.flat(parts["kl"])),
        # importance-weighted entropy of the current policy from generator samples
        "approx_entropy": np.mean(-np.exp(curr[ok] - gen_f[ok]) * curr[ok]),
        "num_tokens": float(len(curr)),
        "num_sequences": float(pb.S),
    })
    return {"loss": loss, "grad": grad.tolist(), "metrics": {k: float(v) for k, v in metrics.items()}}


# ------------------------------------------------------------------------------------------------
# Hand-made batches
# ------------------------------------------------------------------------------------------------

def f32(x):
    return np.asarray(x, dtype=np.float32).astype(np.float64)


def main_batch():
    """Six sequences of 1..8 tokens: ratios inside and outside the clip range (also per sequence),
    importance weights inside and outside the truncation bounds (also as geometric means), and
    tokens whose KL input or output clamp is active."""
    rng = np.random.default_rng(20260401)
    lengths = [1, 3, 5, 8, 4, 7]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    seq_shift = [0.3, -0.35, 0.05, 0.25, -0.1, 0.0]   # per-sequence log-ratio curr - prev
    gen_shift = [0.4, -0.3, 0.0, 0.1, -0.05, 0.6]     # per-sequence log-ratio prev - gen
    prev, gen, curr = [], [], []
    for s, n in enumerate(lengths):
        p = -np.abs(rng.normal(1.0, 0.8, n)) - 0.01
        prev += p.tolist()
        gen += (-np.abs(p - gen_shift[s] - rng.normal(0, 0.25, n))).tolist()
        curr += (-np.abs(p + seq_shift[s] + rng.normal(0, 0.2, n))).tolist()
    prev, gen, curr = np.array(prev), np.array(gen), np.array(curr)
    ref = curr + rng.normal(0.0, 0.8, len(curr))
    # KL clamps: x = ref - curr of 25 (input clamp), -25, 12 (k3 output clamp), 3, -6 (k2 output clamp)
    for t, (c, x) in zip([2, 9, 13, 17, 22], [(-26.0, 25.0), (-0.5, -25.0), (-13.0, 12.0), (-4.0, 3.0), (-0.3, -6.0)]):
        curr[t], ref[t] = c, c + x
        prev[t] = c - 0.05
        gen[t] = c + 0.1
    return {
        "curr": f32(curr), "prev": f32(prev), "gen": f32(gen), "ref": f32(ref),
        "advantages": f32([1.2, -0.7, 0.0, 0.45, -1.5, 2.0]), "offsets": offsets,
        "global_num_tokens": int(offsets[-1]) + 5, "global_num_sequences": len(lengths) + 2,
    }


def nonfinite_batch():
    """NaN, -Inf and +Inf generator log-probs (sequences 0 and 2; sequence 1 is clean)."""
    rng = np.random.default_rng(7)
    lengths = [4, 3, 5]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).tolist()
    T = offsets[-1]
    prev = -np.abs(rng.normal(0.8, 0.6, T)) - 0.01
    gen = -np.abs(prev + rng.normal(0, 0.15, T))
    curr = -np.abs(prev + rng.normal(0, 0.15, T))
    ref = curr + rng.normal(0, 0.5, T)
    gen[1] = np.nan
    gen[9] = -np.inf
    gen[11] = np.inf
    return {
        "curr": f32(curr), "prev": f32(prev), "gen": f32(gen), "ref": f32(ref),
        "advantages": f32([0.8, -1.1, 1.5]), "offsets": offsets,
        "global_num_tokens": T, "global_num_sequences": len(lengths),
    }


LOSS_VARIANTS = [
    # (name, batch, config overrides)
    ("default", "main", {}),
    ("is_untruncated", "main", {"use_importance_sampling_correction": True}),
    ("tis", "main", {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 1.5}),
    ("tis_min", "main", {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 1.5,
                         "truncated_importance_sampling_ratio_min": 0.7}),
    ("icepop", "main", {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 1.5,
                        "truncated_importance_sampling_ratio_min": 0.7,
                        "truncated_importance_sampling_type": "icepop"}),
    ("icepop_no_min", "main", {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 1.3,
                               "truncated_importance_sampling_type": "icepop"}),
    ("seq_mask_tis", "main", {"use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 1.25,
                              "truncated_importance_sampling_ratio_min": 0.8,
                              "truncated_importance_sampling_type": "seq-mask-tis"}),
    ("seq_mask_tis_seq_mean", "main", {"use_importance_sampling_correction": True,
                                       "truncated_importance_sampling_ratio": 1.25,
                                       "truncated_importance_sampling_ratio_min": 0.8,
                                       "truncated_importance_sampling_type": "seq-mask-tis",
                                       "token_level_loss": False}),
    ("seq_ratio", "main", {"sequence_level_importance_ratios": True}),
    ("seq_ratio_is", "main", {"sequence_level_importance_ratios": True, "use_importance_sampling_correction": True}),
    ("seq_ratio_is_seq_mean", "main", {"sequence_level_importance_ratios": True,
                                       "use_importance_sampling_correction": True, "token_level_loss": False}),
    ("seq_ratio_tis", "main", {"sequence_level_importance_ratios": True, "use_importance_sampling_correction": True,
                               "truncated_importance_sampling_ratio": 1.2,
                               "truncated_importance_sampling_ratio_min": 0.9, "token_level_loss": False}),
    ("seq_ratio_icepop", "main", {"sequence_level_importance_ratios": True,
                                  "use_importance_sampling_correction": True,
                                  "truncated_importance_sampling_ratio": 1.2,
                                  "truncated_importance_sampling_ratio_min": 0.9,
                                  "truncated_importance_sampling_type": "icepop"}),
    ("k1", "main", {"reference_policy_kl_type": "k1", "reference_policy_kl_penalty": 0.05,
                    "use_importance_sampling_correction": True, "truncated_importance_sampling_ratio": 2.0}),
    ("k2", "main", {"reference_policy_kl_type": "k2", "reference_policy_kl_penalty": 0.05}),
    ("k3_beta_0.2", "main", {"reference_policy_kl_penalty": 0.2}),
    ("k2_seq_mean", "main", {"reference_policy_kl_type": "k2", "reference_policy_kl_penalty": 0.1,
                             "token_level_loss": False}),
    ("seq_mean", "main", {"token_level_loss": False}),
    ("seq_mean_icepop", "main", {"token_level_loss": False, "use_importance_sampling_correction": True,
                                 "truncated_importance_sampling_ratio": 1.5,
                                 "truncated_importance_sampling_ratio_min": 0.7,
                                 "truncated_importance_sampling_type": "icepop"}),
    ("asymmetric_clip", "main", {"ratio_clip_min": 0.1, "ratio_clip_max": 0.28}),
    ("no_kl_no_ref", "main", {"reference_policy_kl_penalty": 0.0}),
    ("nonfinite_is", "nonfinite", {"use_importance_sampling_correction": True}),
    ("nonfinite_tis", "nonfinite", {"use_importance_sampling_correction": True,
                                    "truncated_importance_sampling_ratio": 2.0,
                                    "truncated_importance_sampling_ratio_min": 0.5}),
    ("nonfinite_icepop", "nonfinite", {"use_importance_sampling_correction": True,
                                       "truncated_importance_sampling_ratio": 2.0,
                                       "truncated_importance_sampling_type": "icepop"}),
    ("nonfinite_seq_mask_tis", "nonfinite", {"use_importance_sampling_correction": True,
                                             "truncated_importance_sampling_ratio": 2.0,
                                             "truncated_importance_sampling_type": "seq-mask-tis"}),
    ("nonfinite_seq_ratio", "nonfinite", {"use_importance_sampling_correction": True,
                                          "sequence_level_importance_ratios": True}),
]

ADVANTAGE_REWARDS = [
    # (name, group_size, rewards)
    ("binary_g4", 4, [1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1]),
    ("continuous_g4", 4, [0.3, 0.7, 0.1, 0.9, 0.25, 0.25, 0.5, 0.125]),
    ("g1", 1, [0.5, 1.0, 0.0]),
    ("g2", 2, [1.0, 0.0, 0.5, 0.5, -0.25, 2.0]),
    ("equal_inexact_g3", 3, [0.1, 0.1, 0.1, 0.2, 0.1, 0.1]),
    ("random_g5", 5, None),
]


def encode(x):
    """JSON has no NaN/Inf: write them as strings."""
    if isinstance(x, (list, tuple, np.ndarray)):
        return [encode(v) for v in x]
    if isinstance(x, dict):
        return {k: encode(v) for k, v in x.items()}
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if np.isnan(x):
            return "nan"
        if np.isinf(x):
            return "inf" if x > 0 else "-inf"
        return x
    if isinstance(x, np.integer):
        return int(x)
    return x


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    out = {"advantage_cases": [], "loss_cases": []}
    rng = np.random.default_rng(99)
    for name, G, rewards in ADVANTAGE_REWARDS:
        if rewards is None:
            rewards = rng.normal(0.0, 1.0, 4 * G)
        rewards = f32(rewards)
        for loo in (True, False):
            for norm in (True, False):
                out["advantage_cases"].append({
                    "name": f"{name}_loo{int(loo)}_norm{int(norm)}", "group_size": G,
                    "use_leave_one_out_baseline": loo, "normalize_rewards": norm, "rewards": rewards,
                    "expected": group_advantages(rewards, G, loo, norm)})
    batches = {"main": main_batch(), "nonfinite": nonfinite_batch()}
    for name, batch_name, overrides in LOSS_VARIANTS:
        case = dict(batches[batch_name])
        case["name"] = name
        case["config"] = overrides
        if overrides.get("reference_policy_kl_penalty", 0.01) == 0.0:
            case["ref"] = np.zeros(0)
        case["expected"] = solve_loss_case(case)
        out["loss_cases"].append(case)
    with open(sys.argv[1], "w") as f:
        json.dump(encode(out), f, indent=1)


if __name__ == "__main__":
    main()
