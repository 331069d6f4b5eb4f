#!/usr/bin/python3
"""PyTorch peer of `fp8rl bench generate`: KV-cached greedy decoding of the same model in BF16.

The model's weights are cast to bfloat16 (eager mode, no autocast needed); each layer keeps a
preallocated K/V cache [B, Hkv, max_len, D]. The prompt of every sequence is prefilled in one
causal forward, then one token per sequence per step is decoded (argmax of the logits) until
--new-tokens. Prints one JSON line with the decode tokens/s (prefill excluded) and the prefill
tokens/s:
  {"suite": "generate", "case": "torch_decode", "sequences": B, "tokens_per_s": ..., ...}
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
from torch_llama import Llama, add_model_arguments  # noqa: E402


def generate(model, prompts, new_tokens):
    """Greedy continuation of prompts [B, P]; returns (prefill seconds, decode seconds)."""
    B, P = prompts.shape
    blocks = model.blocks
    Hkv, D = blocks[0].Hkv, blocks[0].D
    total = P + new_tokens
    caches = [(torch.zeros(B, Hkv, total, D, dtype=torch.bfloat16), torch.zeros(B, Hkv, total, D, dtype=torch.bfloat16))
              for _ in blocks]

    def forward(tokens, pos):
        T = tokens.shape[1]
        x = model.embed(tokens)
        cos, sin = model.cos[pos:pos + T], model.sin[pos:pos + T]
        mask = torch.triu(torch.ones(T, pos + T, dtype=torch.bool), diagonal=pos + 1) if T > 1 else None
        for blk, (kc, vc) in zip(blocks, caches):
            q, k, v = blk.qkv(blk.attn_norm(x), cos, sin)
            kc[:, :, pos:pos + T] = k
            vc[:, :, pos:pos + T] = v
            x = x + blk.o(blk.attend(q, kc[:, :, :pos + T], vc[:, :, :pos + T], mask))
            x = x + blk.mlp(x)
        return model.logits(model.norm(x[:, -1]))

    t0 = time.perf_counter()
    next_tokens = forward(prompts, 0).argmax(-1, keepdim=True)
    t1 = time.perf_counter()
    for i in range(new_tokens - 1):
        next_tokens = forward(next_tokens, P + i).argmax(-1, keepdim=True)
    t2 = time.perf_counter()
    return t1 - t0, t2 - t1


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    add_model_arguments(parser)
    parser.add_argument("--sequences", type=int, required=True)
    parser.add_argument("--prompt-tokens", type=int, required=True)
    parser.add_argument("--new-tokens", type=int, required=True, help="tokens generated per sequence (>= 2)")
    a = parser.parse_args()
    torch.set_num_threads(a.threads)
    model = Llama(a).to(torch.bfloat16).eval()
    prompts = torch.randint(0, a.vocab, (a.sequences, a.prompt_tokens), generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        generate(model, prompts, a.new_tokens)  # warm-up
        runs = [generate(model, prompts, a.new_tokens) for _ in range(max(1, a.repeats))]
    prefill = statistics.median(r[0] for r in runs)
    decode = statistics.median(r[1] for r in runs)
    decoded = a.sequences * (a.new_tokens - 1)
    print(json.dumps({"suite": "generate", "case": "torch_decode", "impl": f"torch {torch.__version__} eager, bf16 weights",
                      "threads": a.threads, "sequences": a.sequences, "prompt_tokens": a.prompt_tokens,
                      "new_tokens": a.new_tokens, "seconds": decode, "tokens_per_s": decoded / decode,
                      "prefill_tokens_per_s": a.sequences * a.prompt_tokens / prefill}), flush=True)


if __name__ == "__main__":
    main()
