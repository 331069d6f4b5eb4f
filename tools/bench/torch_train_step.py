#!/usr/bin/python3
"""PyTorch peer of `fp8rl bench model`: training tokens/s of the same model and batch.

One training step = forward (BF16 autocast on CPU, eager; or plain FP32 with --precision fp32),
mean token cross-entropy, backward,
global-norm clipping to 1.0, torch.optim.AdamW on FP32 master weights: the same work as
fp8rl's sft_step. Random tokens; every position is scored. Prints one JSON line:
  {"suite": "model", "case": "torch_train_step", "tokens_per_s": ..., "seconds": ..., "threads": ...}
or, when the step cannot run under the given limits (e.g. BF16 autocast with oneDNN capped to
AVX2: "could not create a primitive descriptor"), {"suite": ..., "case": ..., "error": "..."}.
With --moe-experts E (Qwen3-MoE; fp8rl passes its ModelConfig's MoE shape) the MLP of every
sparse layer is HF's eager Qwen3MoeSparseMoeBlock loop: an FP32 router linear, softmax, top-k,
optional renormalization, then for each expert the tokens routed to it are gathered, run through
its SwiGLU MLP (under autocast) and index_add-ed back, weighted, into an FP32 output.
Run with Debian's /usr/bin/python3 (python3-torch); fp8rl's benchmark launches it.
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_llama import ATTENTION, Llama, add_model_arguments  # noqa: E402


class Expert(torch.nn.Module):
    def __init__(self, C, Fe):
        super().__init__()
        self.gate = torch.nn.Linear(C, Fe, bias=False)
        self.up = torch.nn.Linear(C, Fe, bias=False)
        self.down = torch.nn.Linear(Fe, C, bias=False)

    def forward(self, x):
        return self.down(F.silu(self.gate(x)) * self.up(x))


class MoeMlp(torch.nn.Module):
    """Qwen3-MoE's sparse MLP as HF's eager Qwen3MoeSparseMoeBlock runs it, router in FP32."""

    def __init__(self, C, E, k, Fe, norm_topk_prob):
        super().__init__()
        self.E, self.k, self.norm_topk_prob = E, k, norm_topk_prob
        self.router = torch.nn.Linear(C, E, bias=False)
        self.experts = torch.nn.ModuleList([Expert(C, Fe) for _ in range(E)])

    def forward(self, h):
        shape = h.shape
        x = h.reshape(-1, shape[-1])
        with torch.autocast("cpu", enabled=False):  # the router in FP32, as fp8rl's
            probs = torch.softmax(F.linear(x.float(), self.router.weight), dim=-1)
        weights, chosen = torch.topk(probs, self.k, dim=-1)  # [N, k]
        if self.norm_topk_prob:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        out = torch.zeros(x.shape, dtype=torch.float32)
        expert_mask = F.one_hot(chosen, num_classes=self.E).permute(2, 1, 0)  # [E, k, N]
        for e in range(self.E):
            slot, token = torch.where(expert_mask[e])
            if token.numel() == 0:
                continue
            y = self.experts[e](x[token]) * weights[token, slot, None]
            out.index_add_(0, token, y.float())
        return out.reshape(shape).to(h.dtype)


def add_moe_arguments(parser):
    parser.add_argument("--moe-experts", type=int, default=0, help="E (0: dense MLPs)")
    parser.add_argument("--moe-top-k", type=int, default=0, help="experts per token")
    parser.add_argument("--moe-d-expert", type=int, default=0, help="each expert's SwiGLU hidden size")
    parser.add_argument("--moe-no-norm-topk", action="store_true", help="keep the top-k probabilities as weights")
    parser.add_argument("--moe-sparse-step", type=int, default=1, help="MoE where (layer + 1) %% step == 0")
    parser.add_argument("--moe-mlp-only-layers", default="", help="comma-separated layers that stay dense")


def make_moe(model, a):
    """Replaces the dense MLP of every MoE layer by MoeMlp (random N(0, 0.02) weights)."""
    if a.moe_experts <= 0:
        return
    dense = {int(v) for v in a.moe_mlp_only_layers.split(",") if v}
    generator = torch.Generator().manual_seed(1)
    for layer, blk in enumerate(model.blocks):
        if (layer + 1) % a.moe_sparse_step != 0 or layer in dense:
            continue
        del blk.gate, blk.up, blk.down
        blk.moe = MoeMlp(a.d_model, a.moe_experts, a.moe_top_k, a.moe_d_expert, not a.moe_no_norm_topk)
        with torch.no_grad():
            for p in blk.moe.parameters():
                p.normal_(0.0, 0.02, generator=generator)
        blk.mlp = lambda x, blk=blk: blk.moe(blk.mlp_norm(x))


def impl(a):
    moe = (f", MoE E={a.moe_experts} k={a.moe_top_k} d_expert={a.moe_d_expert} (HF eager per-expert loop)"
           if a.moe_experts > 0 else "")
    return (f"torch {torch.__version__} eager, {ATTENTION} attention, " +
            ("bf16 autocast" if a.precision == "bf16" else "fp32") + moe)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    add_moe_arguments(parser)
    parser.add_argument("--batch", type=int, required=True, help="sequences per step")
    parser.add_argument("--seq", type=int, required=True, help="tokens per sequence")
    parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16",
                        help="bf16: forward under BF16 autocast (default); fp32: everything in FP32")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = Llama(a)
    make_moe(model, a)
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
        print(json.dumps({"suite": "model", "case": "torch_train_step", "impl": impl(a),
                          "threads": a.threads, "error": str(e).splitlines()[0]}), flush=True)
        return
    times = []
    for _ in range(max(1, a.repeats)):
        t = time.perf_counter()
        step()
        times.append(time.perf_counter() - t)
    seconds = statistics.median(times)
    print(json.dumps({"suite": "model", "case": "torch_train_step", "impl": impl(a),
                      "threads": a.threads, "tokens": a.batch * a.seq, "seconds": seconds,
                      "tokens_per_s": a.batch * a.seq / seconds}), flush=True)


if __name__ == "__main__":
    main()
