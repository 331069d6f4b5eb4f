#!/usr/bin/env python3
"""Markdown table of `fp8rl bench kernels --json` output (the table of docs/kernels.md).

Usage: build/fp8rl bench kernels --json --repeats 5 > k.json; python3 tools/bench_kernels_table.py k.json
"""
import json
import sys


def main(path):
    rows = [json.loads(line) for line in open(path) if line.startswith("{")]
    impl = {}  # (shape, threads, isa limit) -> implementation oneDNN picked
    for r in rows:
        if r["case"] == "onednn_bf16":
            impl[(r["shape"], r["threads"], r.get("isa_limit", ""))] = r.get("impl", "")
    print("| case | shape (M x N x K) | ISA | threads | figure | limit | ratio to limit "
          "| oneDNN default (impl) | ratio | oneDNN AVX-512 BF16 | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        case = r["case"]
        if case == "onednn_bf16":
            continue
        if case.startswith("peak"):
            print(f"| {case} | register-only | {'amx' if 'amx' in case else 'avx512'} | {r['threads']} "
                  f"| {r['gflops']:.0f} GFLOP/s | | | | | | |")
        elif case == "read_bandwidth":
            print(f"| {case} | 1 GiB stream | | {r['threads']} | {r['gbps']:.1f} GB/s | | | | | | |")
        elif case.startswith("gemm"):
            default = impl.get((r["shape"], r["threads"], "default"), "")
            print(f"| {case} | {r['shape']} | {r['isa']} | {r['threads']} | {r['gflops']:.0f} GFLOP/s "
                  f"| {r['limit_gflops']:.0f} | {r['ratio_to_limit']:.2f} "
                  f"| {r['peer_gflops']:.0f} ({default}) | {r['ratio_to_peer']:.2f} "
                  f"| {r['peer_gflops_avx512']:.0f} | {r['ratio_to_peer_avx512']:.2f} |")
        elif case.startswith("gemv"):
            figure = f"{r['gbps']:.1f} GB/s of weights, {r['tokens_per_s']:.0f} tokens/s"
            if "speedup_vs_gemv_bf16" in r:
                figure += f", {r['speedup_vs_gemv_bf16']:.2f}x gemv_bf16 tokens/s"
            if "speedup_vs_m1" in r:
                figure += f", {r['speedup_vs_m1']:.2f}x M = 1"
            isa = r["isa"] if r.get("batch_invariant", True) else f"{r['isa']} (not batch invariant)"
            print(f"| {case} ({r['activations']} x) | {r['shape']} | {isa} | {r['threads']} | {figure} "
                  f"| {r['limit_gbps']:.1f} GB/s | {r['ratio_to_limit']:.2f} | | | | |")
        elif case == "pack_fp8_weights":
            print(f"| {case} (from FP32 master) | {r['shape']} | | {r['threads']} | {r['gbps']:.1f} GB/s of FP32 read "
                  f"| {r['limit_gbps']:.1f} GB/s | {r['ratio_to_limit']:.2f} | | | | |")


if __name__ == "__main__":
    main(sys.argv[1])
