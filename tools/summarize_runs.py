#!/usr/bin/env python3
"""Summarizes GRPO run directories into the table of docs/results.md.

Usage: tools/summarize_runs.py runs/results/<preset>-seed<k> ...
Groups runs by the name before "-seed", and prints per group the mean (with its 95 % interval and
min..max) over seeds of: the final validation accuracy, mean token_mult_prob_error, gen_kl_error
and is_oob_ratio, mean reward of the first and last five steps, and the mean step-time split;
then, for every pair of groups, the difference in final validation accuracy with Welch's 95 %
interval. The intervals follow src/report/intervals.h (the same t table, the row at or below the
degrees of freedom), so this table and `fp8rl report`'s agree.
"""
import math
import json
import re
import sys
from collections import defaultdict


# (df, t_{0.975, df}): the standard two-sided 95 % table.
T975 = [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (7, 2.365), (8, 2.306),
        (9, 2.262), (10, 2.228), (11, 2.201), (12, 2.179), (13, 2.160), (14, 2.145), (15, 2.131), (16, 2.120),
        (17, 2.110), (18, 2.101), (19, 2.093), (20, 2.086), (21, 2.080), (22, 2.074), (23, 2.069), (24, 2.064),
        (25, 2.060), (26, 2.056), (27, 2.052), (28, 2.048), (29, 2.045), (30, 2.042), (40, 2.021), (60, 2.000),
        (120, 1.980), (math.inf, 1.960)]


def t975(df):
    return [t for row, t in T975 if row <= df][-1]


def moments(xs):
    n = len(xs)
    mean = sum(xs) / n
    var = sum((x - mean) ** 2 for x in xs) / (n - 1) if n > 1 else math.nan
    return n, mean, var


def mean_ci(xs):
    n, mean, var = moments(xs)
    return mean, (t975(n - 1) * math.sqrt(var / n) if n > 1 else math.nan)


def welch(a, b):
    na, ma, va = moments(a)
    nb, mb, vb = moments(b)
    if na < 2 or nb < 2:
        return ma - mb, math.nan
    sa, sb = va / na, vb / nb
    se2 = sa + sb
    if se2 == 0:
        return ma - mb, 0.0
    df = se2 ** 2 / (sa ** 2 / (na - 1) + sb ** 2 / (nb - 1))
    return ma - mb, t975(df) * math.sqrt(se2)


def mean_of(steps, key):
    xs = [s[key] for s in steps if isinstance(s.get(key), (int, float))]
    return sum(xs) / len(xs) if xs else math.nan


def summarize(run_dir):
    steps = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    vals = [s["val_accuracy"] for s in steps if "val_accuracy" in s]
    timing = {k: sum(s["timing"][k] for s in steps) / len(steps)
              for k in ("generation", "logprobs", "training", "refit", "kv_calibration", "total")}
    return {
        "val_end": vals[-1] if vals else float("nan"),
        "mult": mean_of(steps, "token_mult_prob_error"),
        "gen_kl": mean_of(steps, "gen_kl_error"),
        "oob": mean_of(steps, "is_oob_ratio"),
        "reward_first": sum(s["reward_mean"] for s in steps[:5]) / min(5, len(steps)),
        "reward_last": sum(s["reward_mean"] for s in steps[-5:]) / min(5, len(steps)),
        "timing": timing,
    }


def main():
    groups = defaultdict(list)
    for d in sys.argv[1:]:
        name = re.sub(r"-seed\d+/?$", "", d.rstrip("/").split("/")[-1])
        groups[name].append(summarize(d))
    print("| preset | seeds | final val accuracy (mean +- 95 % interval, min..max) | reward first 5 -> last 5 steps | "
          "mean token_mult_prob_error | mean gen_kl_error | mean is_oob_ratio | mean step s | generation | logprobs | "
          "training | refit | kv_calibration |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in groups.items():
        n = len(runs)
        val = [r["val_end"] for r in runs]
        mean, ci = mean_ci(val)
        t = {k: sum(r["timing"][k] for r in runs) / n for k in runs[0]["timing"]}
        print(f"| {name} | {n} | {mean:.3f} +- {ci:.3f} ({min(val):.3f}..{max(val):.3f}) | "
              f"{sum(r['reward_first'] for r in runs)/n:.3f} -> {sum(r['reward_last'] for r in runs)/n:.3f} | "
              f"{sum(r['mult'] for r in runs)/n:.5f} | {sum(r['gen_kl'] for r in runs)/n:.3g} | "
              f"{sum(r['oob'] for r in runs)/n:.4f} | {t['total']:.3f} | {t['generation']:.3f} | {t['logprobs']:.3f} | "
              f"{t['training']:.3f} | {t['refit']:.4f} ({100*t['refit']/t['total']:.1f} %) | "
              f"{t['kv_calibration']:.4f} ({100*t['kv_calibration']/t['total']:.1f} %) |")


    names = list(groups)
    if len(names) > 1:
        print()
        print("| a | b | final val accuracy a - b | 95 % interval (Welch) |")
        print("|---|---|---|---|")
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                d, ci = welch([r["val_end"] for r in groups[a]], [r["val_end"] for r in groups[b]])
                interval = f"{d - ci:.3f} .. {d + ci:.3f}" if not math.isnan(ci) else "- (fewer than two runs)"
                print(f"| {a} | {b} | {d:.3f} | {interval} |")


if __name__ == "__main__":
    main()
