#!/usr/bin/python3
"""PyTorch peer of `fp8rl bench model`: training tokens/s of the same model and batch.

One training step = forward (BF16 autocast on CPU, eager; or plain FP32 with --precision fp32),
mean token cross-entropy, backward,
global-norm clipping to 1.0, torch.optim.AdamW on FP32 master weights: the same work as
fp8rl's sft_step. Random tokens; every position is scored. Prints one JSON line:
  {"suite": "model", "case": "torch_train_step", "tokens_per_s": ..., "seconds": ..., "threads": ...}
or, when the step cannot run under the given limits (e.g. BF16 autocast with oneDNN capped to
AVX2: "could not create a primitive descriptor"), {"suite": ..., "case": ..., "error": "..."}.
Run with Debian's /usr/bin/python3 (python3-torch); fp8rl's benchmark launches it.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import ATTENTION, Llama, add_model_arguments  # noqa: E402


def impl(precision):
    return (f"torch {torch.__version__} eager, {ATTENTION} attention, " +
            ("bf16 autocast" if precision == "bf16" else "fp32"))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--batch", type=int, required=True, help="sequences per step")
    parser.add_argument("--seq", type=int, required=True, help="tokens per sequence")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                        help="bf16: forward under BF16 autocast (default); fp32: everything in FP32")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Llama(a)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    tokens = torch.randint(0, a.vocab, (a.batch, a.seq + 1))
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    def step():
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(inputs)
        loss = torch.nn.functional.cross_entropy(logits.float().reshape(-1, a.vocab), targets.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()

    try:
        step()  # warm-up
    except RuntimeError as e:
        print(json.dumps({"suite": "model", "case": "torch_train_step", "impl": impl(a.precision),
                          "threads": a.threads, "error": str(e).splitlines()[0]}), flush=True)
        return
    times = []
    for _ in range(max(1, a.repeats)):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    print(json.dumps({"suite": "model", "case": "torch_train_step", "impl": impl(a.precision),
                      "threads": a.threads, "tokens": a.batch * a.seq, "seconds": seconds,
                      "tokens_per_s": a.batch * a.seq / seconds}), flush=True)


if __name__ == "__main__":
    main()
