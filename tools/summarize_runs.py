#!/usr/bin/env python3
"""Summarizes GRPO run directories into the table of docs/results.md.

Usage: tools/summarize_runs.py runs/results/<preset>-seed<k> ...
Groups runs by the name before "-seed", and prints per group the mean (and min..max) over seeds of:
validation accuracy at the start and the end, mean token_mult_prob_error, mean reward of the
first and last five steps, and the mean step-time split.
"""
import json
import re
import sys
from collections import defaultdict


def summarize(run_dir):
    steps = [json.loads(line) for line in open(f"{run_dir}/metrics.jsonl")]
    vals = [s["val_accuracy"] for s in steps if "val_accuracy" in s]
    timing = {k: sum(s["timing"][k] for s in steps) / len(steps)
              for k in ("generation", "logprobs", "training", "refit", "kv_calibration", "total")}
    return {
        "val_end": vals[-1] if vals else float("nan"),
        "mult": sum(s["token_mult_prob_error"] for s in steps) / len(steps),
        "reward_first": sum(s["reward_mean"] for s in steps[:5]) / min(5, len(steps)),
        "reward_last": sum(s["reward_mean"] for s in steps[-5:]) / min(5, len(steps)),
        "timing": timing,
    }


def main():
    groups = defaultdict(list)
    for d in sys.argv[1:]:
        name = re.sub(r"-seed\d+/?$", "", d.rstrip("/").split("/")[-1])
        groups[name].append(summarize(d))
    print("| preset | seeds | final val accuracy (mean, min..max) | reward first 5 -> last 5 steps | "
          "mean token_mult_prob_error | mean step s | generation | logprobs | training | refit | kv_calibration |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, runs in groups.items():
        n = len(runs)
        val = [r["val_end"] for r in runs]
        t = {k: sum(r["timing"][k] for r in runs) / n for k in runs[0]["timing"]}
        print(f"| {name} | {n} | {sum(val)/n:.3f} ({min(val):.3f}..{max(val):.3f}) | "
              f"{sum(r['reward_first'] for r in runs)/n:.3f} -> {sum(r['reward_last'] for r in runs)/n:.3f} | "
              f"{sum(r['mult'] for r in runs)/n:.5f} | {t['total']:.3f} | {t['generation']:.3f} | {t['logprobs']:.3f} | "
              f"{t['training']:.3f} | {t['refit']:.4f} ({100*t['refit']/t['total']:.1f} %) | "
              f"{t['kv_calibration']:.4f} ({100*t['kv_calibration']/t['total']:.1f} %) |")


if __name__ == "__main__":
    main()
