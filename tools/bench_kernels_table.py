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
        if r["case"] in ("onednn_bf16", "onednn_f32"):
            impl[(r["shape"], r["threads"], r.get("isa_limit", ""))] = r.get("impl", "")

    def peer(r, suffix):  # "figure | ratio" cells of one peer, empty where the line has none
        if f"peer_gflops{suffix}" not in r:
            return " |"
        return f"{r[f'peer_gflops{suffix}']:.0f} | {r[f'ratio_to_peer{suffix}']:.2f}"

    print("| case | shape (M x N x K) | ISA | threads | figure | limit | ratio to limit "
          "| oneDNN default (impl) | ratio | oneDNN AVX-512 BF16 | ratio | oneDNN AVX2 FP32 (impl) | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    empty = "| | | | | | | | |"
    for r in rows:
        case = r["case"]
        if case in ("onednn_bf16", "onednn_f32"):
            continue
        if case.startswith("peak"):
            isa = "amx" if "amx" in case else "avx2" if "avx2" in case else "avx512"
            print(f"| {case} | register-only | {isa} | {r['threads']} | {r['gflops']:.0f} GFLOP/s {empty}")
        elif case == "read_bandwidth":
            print(f"| {case} | 1 GiB stream | | {r['threads']} | {r['gbps']:.1f} GB/s {empty}")
        elif case.startswith("gemm"):
            default = impl.get((r["shape"], r["threads"], "default"), "")
            limit = f"{r['limit_gflops']:.0f} | {r['ratio_to_limit']:.2f}" if "limit_gflops" in r else " |"
            default_peer = (f"{r['peer_gflops']:.0f} ({default}) | {r['ratio_to_peer']:.2f}"
                            if "peer_gflops" in r else " |")
            avx2_peer = " |"
            if "peer_gflops_avx2" in r:
                avx2_impl = impl.get((r["shape"], r["threads"], "avx2"), "")
                avx2_peer = f"{r['peer_gflops_avx2']:.0f} ({avx2_impl}) | {r['ratio_to_peer_avx2']:.2f}"
            print(f"| {case} | {r['shape']} | {r['isa']} | {r['threads']} | {r['gflops']:.0f} GFLOP/s "
                  f"| {limit} | {default_peer} | {peer(r, '_avx512')} | {avx2_peer} |")
        elif case.startswith("gemv"):
            figure = f"{r['gbps']:.1f} GB/s of weights, {r['tokens_per_s']:.0f} tokens/s"
            if "speedup_vs_gemv_bf16" in r:
                figure += f", {r['speedup_vs_gemv_bf16']:.2f}x gemv_bf16 tokens/s"
            if "speedup_vs_m1" in r:
                figure += f", {r['speedup_vs_m1']:.2f}x M = 1"
            isa = r["isa"] if r.get("batch_invariant", True) else f"{r['isa']} (not batch invariant)"
            print(f"| {case} ({r['activations']} x) | {r['shape']} | {isa} | {r['threads']} | {figure} "
                  f"| {r['limit_gbps']:.1f} GB/s | {r['ratio_to_limit']:.2f} | | | | | | |")
        elif case == "pack_fp8_weights":
            print(f"| {case} (from FP32 master) | {r['shape']} | | {r['threads']} | {r['gbps']:.1f} GB/s of FP32 read "
                  f"| {r['limit_gbps']:.1f} GB/s | {r['ratio_to_limit']:.2f} | | | | | | |")


if __name__ == "__main__":
    main(sys.argv[1])
