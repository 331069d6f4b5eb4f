#!/usr/bin/python3
"""Independent float64 PyTorch reference for HF Llama / Qwen2 / Qwen3 / Qwen3-MoE model directories.

Written from the published semantics of HF transformers' modeling_llama.py / modeling_qwen2.py /
modeling_qwen3.py / modeling_qwen3_moe.py, not from fp8rl's code. Debian has no `safetensors` or `transformers`, so
the safetensors format (u64 LE header length N | N-byte JSON header | data buffer) is read and
written here.

Usage (Debian's /usr/bin/python3, torch 1.13, numpy):
  hf_reference.py make-checkpoint OUT_DIR --arch llama|qwen2|qwen3|qwen3_moe [--dtype f32|bf16|f16]
        [--shards N] [--seed S] [--vocab V] [--hidden C] [--layers L] [--heads H] [--kv-heads K]
        [--head-dim D] [--intermediate F] [--tie 0|1] [--rope-scaling 0|1] [--max-pos P]
        [--rope-theta T] [--eps E]
        qwen3_moe only: [--experts E] [--top-k K] [--moe-ff F] [--norm-topk 0|1]
        [--mlp-only-layers L1,L2,...] [--sparse-step S]
      Random tiny checkpoint in the exact HF layout (config.json, model.safetensors or
      model-0000i-of-0000N.safetensors + model.safetensors.index.json).
  hf_reference.py logprobs MODEL_DIR BATCH OUT
      BATCH: I32 tokens [B,T], I32 targets [B,T] (-1: not scored), I32 lengths [B].
      OUT (F32): logits [B,T,V], logprobs [B,T] (0 where target == -1); for qwen3_moe also
      route_margin [B,T]: over the MoE layers, the smallest (p_k - p_k+1) / p_k of the position's
      sorted router probabilities (how far its top-k choice is from a tie; inf where k = E).
      Weights may be F32, BF16, F16, or F8_E4M3 with an F32 NAME_scale_inv block-scale companion.
  hf_reference.py e4m3-table OUT        F32 values [256]: the decoded value of every E4M3 code
  hf_reference.py selftest              self-checks (exit status 0 when all pass)
  hf_reference.py each -- CMD ARGS... [';' CMD ARGS...]...
      Several of the commands above in one process (torch's import costs about two seconds).
"""
import argparse
import json
import math
import os
import struct
import sys
import tempfile

import numpy as np
import torch

# safetensors dtype code -> (numpy storage dtype, torch dtype to reinterpret the storage as)
ST_DTYPES = {"F64": ("<f8", None), "F32": ("<f4", None), "F16": ("<f2", None),
             "BF16": ("<i2", torch.bfloat16), "I64": ("<i8", None), "I32": ("<i4", None),
             "U8": ("u1", None), "F8_E4M3": ("u1", None)}
TORCH_CODES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16",
               torch.bfloat16: "BF16", torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8"}
DTYPE_ARGS = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}
HF_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 64}


# ----------------------------------------------------------------------------- safetensors I/O
def read_safetensors(path):
    """Return {name: tensor}; F8_E4M3 tensors come back as their raw uint8 codes."""
    if not os.path.isfile(path):
        sys.exit(f"hf_reference: missing file: {path}")
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = memoryview(blob)[8 + n:]
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        if e["dtype"] not in ST_DTYPES:
            sys.exit(f"hf_reference: {path}: tensor {name}: unsupported dtype {e['dtype']}")
        np_dtype, view = ST_DTYPES[e["dtype"]]
        begin, end = e["data_offsets"]
        arr = np.frombuffer(data[begin:end], dtype=np_dtype)
        if arr.size != math.prod(e["shape"]):
            sys.exit(f"hf_reference: {path}: tensor {name}: byte size does not match shape")
        t = torch.from_numpy(arr.reshape(e["shape"]).copy())
        out[name] = t.view(view) if view is not None else t
    return out


def write_safetensors(path, tensors, metadata=None):
    """tensors: {name: tensor or (dtype_code, uint8 tensor)}, written in insertion order."""
    header = {"__metadata__": metadata} if metadata else {}
    chunks, offset = [], 0
    for name, t in tensors.items():
        code, t = t if isinstance(t, tuple) else (TORCH_CODES[t.dtype], t)
        t = t.detach().contiguous()
        raw = (t.view(torch.int16) if t.dtype == torch.bfloat16 else t).numpy().tobytes()
        header[name] = {"dtype": code, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    hb = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hb += b" " * (-len(hb) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hb)) + hb + b"".join(chunks))


# ----------------------------------------------------------------------------- FP8 E4M3
def e4m3_table():
    """float64 [256]: OCP E4M3 "FN" (bias 7, subnormals, 0x7F/0xFF NaN, no infinities)."""
    vals = []
    for code in range(256):
        sign = -1.0 if code & 0x80 else 1.0
        exp, man = (code >> 3) & 0xF, code & 0x7
        if exp == 15 and man == 7:
            vals.append(float("nan"))
        elif exp == 0:
            vals.append(sign * (man / 8.0) * 2.0 ** -6)
        else:
            vals.append(sign * (1.0 + man / 8.0) * 2.0 ** (exp - 7))
    return torch.tensor(vals, dtype=torch.float64)


def dequantize_fp8(codes, scale_inv, block, name):
    """E4M3 codes [R, C] times their [ceil(R/br), ceil(C/bc)] block's scale_inv, in float64."""
    rows, cols = codes.shape
    br, bc = block
    want = [-(-rows // br), -(-cols // bc)]
    if list(scale_inv.shape) != want:
        sys.exit(f"hf_reference: {name}_scale_inv has shape {list(scale_inv.shape)}, want {want}")
    s = scale_inv.to(torch.float64).repeat_interleave(br, 0).repeat_interleave(bc, 1)
    return e4m3_table()[codes.long()] * s[:rows, :cols]


# ----------------------------------------------------------------------------- loading
class Weights(dict):
    """A dict whose missing keys end the run with a message naming the tensor and its source."""

    def __init__(self, source, items=()):
        super().__init__(items)
        self.source = source

    def __missing__(self, name):
        sys.exit(f"hf_reference: missing tensor {name} in {self.source}")


def load_model(model_dir):
    """Return (config dict, Weights of float64 tensors) for an HF model directory."""
    cfg_path = os.path.join(model_dir, "config.json")
    if not os.path.isfile(cfg_path):
        sys.exit(f"hf_reference: missing file: {cfg_path}")
    with open(cfg_path) as f:
        cfg = json.load(f)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    raw = {}
    for fn in files:
        raw.update(read_safetensors(os.path.join(model_dir, fn)))
    block = (cfg.get("quantization_config") or {}).get("weight_block_size", [128, 128])
    w = Weights(model_dir)
    for name, t in raw.items():
        if name.endswith("_scale_inv"):
            continue
        if t.dtype == torch.uint8:  # F8_E4M3
            if name + "_scale_inv" not in raw:
                sys.exit(f"hf_reference: missing tensor {name}_scale_inv (F8_E4M3 {name}'s scales)"
                         f" in {model_dir}")
            w[name] = dequantize_fp8(t, raw[name + "_scale_inv"], block, name)
        else:
            w[name] = t.to(torch.float64)
    return cfg, w


# ----------------------------------------------------------------------------- forward (float64)
def rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def rope_inv_freq(cfg, dim):
    """inv_freq[i] = theta^(-2i/D), with HF's Llama-3 scaling when rope_scaling asks for it."""
    inv = cfg.get("rope_theta", 10000.0) ** (-torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    rs = cfg.get("rope_scaling") or {}
    kind = rs.get("rope_type", rs.get("type"))
    if kind in (None, "default"):
        return inv
    if kind != "llama3":
        sys.exit(f"hf_reference: unsupported rope_scaling type {kind!r}")
    factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
    old_len = rs["original_max_position_embeddings"]
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > old_len / lo, inv / factor, inv)
    smooth = (old_len / wavelen - lo) / (hi - lo)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= old_len / hi) & (wavelen <= old_len / lo)
    return torch.where(medium, smoothed, scaled)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def attention(cfg, w, p, x, cos, sin, is_qwen3):
    """HF self-attention: q/k/v projections (Qwen2: with biases), (Qwen3) per-head
    q_norm/k_norm, rotate_half RoPE, repeat_kv for GQA, causal softmax(q k^T / sqrt(D)) v,
    o_proj."""
    b, t, _ = x.shape
    h, k = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    d = cfg.get("head_dim") or cfg["hidden_size"] // h
    qwen2 = cfg.get("model_type") == "qwen2"

    def proj(name):
        y = x @ w[p + name + ".weight"].T
        return y + w[p + name + ".bias"] if qwen2 else y
    q = proj("q_proj").view(b, t, h, d)
    kk = proj("k_proj").view(b, t, k, d)
    v = proj("v_proj").view(b, t, k, d)
    if is_qwen3:
        q = rms_norm(q, w[p + "q_norm.weight"], cfg["rms_norm_eps"])
        kk = rms_norm(kk, w[p + "k_norm.weight"], cfg["rms_norm_eps"])
    q, kk, v = (z.transpose(1, 2) for z in (q, kk, v))  # [B, heads, T, D]
    q = q * cos + rotate_half(q) * sin
    kk = kk * cos + rotate_half(kk) * sin
    kk, v = kk.repeat_interleave(h // k, dim=1), v.repeat_interleave(h // k, dim=1)  # repeat_kv
    scores = (q @ kk.transpose(-1, -2)) / math.sqrt(d)
    causal = torch.ones(t, t, dtype=torch.bool).triu(1)
    probs = torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1)
    out = (probs @ v).transpose(1, 2).reshape(b, t, h * d)
    return out @ w[p + "o_proj.weight"].T


def dense_mlp(w, p, x):
    """SwiGLU: down(silu(gate(x)) * up(x)); p ends in "mlp." or "mlp.experts.{e}."."""
    gate = torch.nn.functional.silu(x @ w[p + "gate_proj.weight"].T)
    return (gate * (x @ w[p + "up_proj.weight"].T)) @ w[p + "down_proj.weight"].T


def is_moe_layer(cfg, i):
    """HF Qwen3MoeDecoderLayer: sparse unless listed in mlp_only_layers or off the step."""
    return (cfg.get("model_type") == "qwen3_moe" and cfg.get("num_experts", 0) > 0 and
            i not in (cfg.get("mlp_only_layers") or []) and
            (i + 1) % cfg.get("decoder_sparse_step", 1) == 0)


def moe_mlp(cfg, w, p, x, margins=None):
    """HF Qwen3MoeSparseMoeBlock: softmax of the router logits over the experts, torch.topk,
    (norm_topk_prob) the k weights divided by their sum, out = sum_j weight_j * expert_j(x).
    margins: a list to append [B, T] (p_k - p_k+1) / p_k to (how near the k-th choice is a tie)."""
    e, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    probs = torch.softmax(x @ w[p + "gate.weight"].T, dim=-1)  # [B, T, E]
    weight, expert = torch.topk(probs, k, dim=-1)
    if cfg.get("norm_topk_prob", False):  # Qwen3MoeConfig's default is False
        weight = weight / weight.sum(-1, keepdim=True)
    if margins is not None:
        top = torch.topk(probs, min(k + 1, e), dim=-1)[0]
        margins.append((top[..., k - 1] - top[..., k]) / top[..., k - 1] if k < e
                       else torch.full(probs.shape[:-1], math.inf, dtype=torch.float64))
    out = torch.zeros_like(x)
    for i in range(e):  # each expert over the tokens that chose it, as HF's loop does
        hit = expert == i  # [B, T, k]; a token chooses an expert at most once
        if hit.any():
            wi = (weight * hit).sum(-1, keepdim=True)  # [B, T, 1], 0 where not chosen
            out = out + wi * dense_mlp(w, f"{p}experts.{i}.", x)
    return out


def forward(cfg, w, tokens, margins=None):
    """tokens [B, T] (long) -> float64 logits [B, T, V]; positions are 0..T-1. margins: see
    moe_mlp (one [B, T] per MoE layer)."""
    is_qwen3 = cfg.get("model_type") in ("qwen3", "qwen3_moe")  # q/k norm
    if not is_qwen3 and cfg.get("model_type") not in ("llama", "qwen2"):
        sys.exit(f"hf_reference: unsupported model_type {cfg.get('model_type')!r}")
    eps, t = cfg["rms_norm_eps"], tokens.shape[1]
    d = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
    angle = torch.arange(t, dtype=torch.float64)[:, None] * rope_inv_freq(cfg, d)[None, :]
    emb = torch.cat((angle, angle), dim=-1)
    cos, sin = emb.cos(), emb.sin()
    hid = w["model.embed_tokens.weight"][tokens]
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = rms_norm(hid, w[p + "input_layernorm.weight"], eps)
        hid = hid + attention(cfg, w, p + "self_attn.", x, cos, sin, is_qwen3)
        x = rms_norm(hid, w[p + "post_attention_layernorm.weight"], eps)
        hid = hid + (moe_mlp(cfg, w, p + "mlp.", x, margins) if is_moe_layer(cfg, i)
                     else dense_mlp(w, p + "mlp.", x))
    hid = rms_norm(hid, w["model.norm.weight"], eps)
    tied = cfg.get("tie_word_embeddings", False)
    return hid @ w["model.embed_tokens.weight" if tied else "lm_head.weight"].T


def compute_logprobs(model_dir, batch_path, out_path):
    """The `logprobs` subcommand: F32 logits [B,T,V] and target log-probs [B,T] to out_path."""
    cfg, w = load_model(model_dir)
    batch = Weights(batch_path, read_safetensors(batch_path))
    tokens, targets = batch["tokens"].long(), batch["targets"].long()
    lengths = batch["lengths"].long() if "lengths" in batch else None
    if lengths is not None:  # padding tokens may be anything; they only feed later positions
        pad = torch.arange(tokens.shape[1])[None, :] >= lengths[:, None]
        tokens = tokens.masked_fill(pad, 0)
    vocab = cfg["vocab_size"]
    if tokens.min() < 0 or tokens.max() >= vocab or targets.min() < -1 or targets.max() >= vocab:
        sys.exit(f"hf_reference: {batch_path}: token or target out of range [0, {vocab})")
    margins = []
    logits = forward(cfg, w, tokens, margins)
    lp = torch.log_softmax(logits, dim=-1).gather(-1, targets.clamp(min=0)[..., None])[..., 0]
    lp = lp.masked_fill(targets == -1, 0.0)
    out = {"logits": logits.float(), "logprobs": lp.float()}
    if margins:
        margin = torch.stack(margins).min(0)[0]
        real = margin if lengths is None else margin.masked_fill(pad, math.inf)
        if real.min() < 1e-4:  # an FP32 model may choose other experts there
            print(f"hf_reference: {model_dir}: a token's k-th and (k+1)-th router probabilities"
                  f" are {real.min().item():.1e} apart (relative)", file=sys.stderr)
        out["route_margin"] = margin.float()
    write_safetensors(out_path, out)


# ----------------------------------------------------------------------------- make-checkpoint
def layer_shapes(a, i):
    """(name, shape) of decoder layer i's tensors, in checkpoint order."""
    c, d, f = a.hidden, a.head_dim, a.intermediate
    qd, kd = a.heads * d, a.kv_heads * d
    qk_norm = [("self_attn.q_norm", [d]), ("self_attn.k_norm", [d])] if a.arch.startswith("qwen3") else []
    bias = ([("self_attn.q_proj.bias", [qd]), ("self_attn.k_proj.bias", [kd]), ("self_attn.v_proj.bias", [kd])]
            if a.arch == "qwen2" else [])

    def swiglu(p, f):
        return [(p + "gate_proj", [f, c]), (p + "up_proj", [f, c]), (p + "down_proj", [c, f])]
    if is_moe_layer(moe_config(a), i):
        mlp = [("mlp.gate", [a.experts, c])]
        mlp += [s for e in range(a.experts) for s in swiglu(f"mlp.experts.{e}.", a.moe_ff)]
    else:
        mlp = swiglu("mlp.", f)
    return ([("input_layernorm", [c]), ("self_attn.q_proj", [qd, c]), ("self_attn.k_proj", [kd, c]),
             ("self_attn.v_proj", [kd, c])] + bias + [("self_attn.o_proj", [c, qd])] + qk_norm +
            [("post_attention_layernorm", [c])] + mlp)


def checkpoint_tensors(a, gen):
    """Random HF-named float32 tensors in checkpoint order: matrices normal with std 0.05
    (embedding 0.5, so that logits are not flat; an MoE router 0.2, so that its logits spread
    about 1.6 and no token's k-th and (k+1)-th experts are near a tie), norm weights
    1 + 0.1 * normal, biases 0.5 * normal (large enough to move every logit)."""
    shapes = [("model.embed_tokens", [a.vocab, a.hidden])]
    shapes += [(f"model.layers.{i}.{n}", s) for i in range(a.layers) for n, s in layer_shapes(a, i)]
    shapes += [("model.norm", [a.hidden])] + ([] if a.tie else [("lm_head", [a.vocab, a.hidden])])
    out = {}
    for name, shape in shapes:
        x = torch.randn(*shape, generator=gen)
        if name.endswith(".bias"):
            out[name] = 0.5 * x
            continue
        std = 0.5 if name == "model.embed_tokens" else 0.2 if name.endswith(".mlp.gate") else 0.05
        out[name + ".weight"] = 1.0 + 0.1 * x if len(shape) == 1 else std * x
    return out


def moe_config(a):
    """The Qwen3MoeConfig keys of make-checkpoint's arguments ({} unless --arch qwen3_moe)."""
    if a.arch != "qwen3_moe":
        return {}
    return {"model_type": a.arch, "num_experts": a.experts, "num_experts_per_tok": a.top_k,
            "moe_intermediate_size": a.moe_ff, "norm_topk_prob": bool(a.norm_topk),
            "decoder_sparse_step": a.sparse_step, "mlp_only_layers": a.mlp_only_layers}


def hf_config(a, dtype):
    names = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM",
             "qwen3_moe": "Qwen3MoeForCausalLM"}
    # Qwen2Config has no attention_bias key: its q, k and v biases are the architecture's.
    bias = {"use_sliding_window": False} if a.arch == "qwen2" else {"attention_bias": False}
    return {
        "architectures": [names[a.arch]],
        "model_type": a.arch, "vocab_size": a.vocab, "hidden_size": a.hidden,
        "intermediate_size": a.intermediate, "num_hidden_layers": a.layers,
        "num_attention_heads": a.heads, "num_key_value_heads": a.kv_heads,
        "head_dim": a.head_dim, "max_position_embeddings": a.max_pos, "rms_norm_eps": a.eps,
        "rope_theta": a.rope_theta, "rope_scaling": LLAMA3_SCALING if a.rope_scaling else None,
        "tie_word_embeddings": bool(a.tie), "hidden_act": "silu",
        "torch_dtype": HF_DTYPE_NAMES[dtype], **bias,
        "bos_token_id": 1, "eos_token_id": 2, **moe_config(a)}


def make_checkpoint(a):
    a.mlp_only_layers = [int(x) for x in a.mlp_only_layers.split(",") if x.strip()]
    if a.rope_theta is None:
        a.rope_theta = 10000.0 if a.arch == "llama" else 1000000.0
    if a.arch == "qwen3_moe" and not (1 <= a.top_k <= a.experts and a.moe_ff >= 1 and
                                      a.sparse_step >= 1 and
                                      all(0 <= x < a.layers for x in a.mlp_only_layers)):
        sys.exit("hf_reference: want 1 <= --top-k <= --experts, --moe-ff, --sparse-step >= 1 and "
                 "--mlp-only-layers in [0, --layers)")
    if a.rope_scaling and a.arch != "llama":
        sys.exit("hf_reference: --rope-scaling 1 is only valid for --arch llama")
    if a.heads % a.kv_heads:
        sys.exit("hf_reference: --heads must be a multiple of --kv-heads")
    dtype = DTYPE_ARGS[a.dtype]
    gen = torch.Generator().manual_seed(a.seed)
    ts = {k: v.to(dtype) for k, v in checkpoint_tensors(a, gen).items()}
    if not 1 <= a.shards <= len(ts):
        sys.exit(f"hf_reference: --shards must be in [1, {len(ts)}]")
    os.makedirs(a.out_dir, exist_ok=True)
    with open(os.path.join(a.out_dir, "config.json"), "w") as f:
        json.dump(hf_config(a, dtype), f, indent=2)
    meta = {"format": "pt"}
    if a.shards == 1:
        write_safetensors(os.path.join(a.out_dir, "model.safetensors"), ts, meta)
        return
    names, weight_map = list(ts), {}
    for s in range(a.shards):
        fn = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = names[s * len(names) // a.shards:(s + 1) * len(names) // a.shards]
        write_safetensors(os.path.join(a.out_dir, fn), {n: ts[n] for n in part}, meta)
        weight_map.update({n: fn for n in part})
    total = sum(t.numel() * t.element_size() for t in ts.values())
    with open(os.path.join(a.out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


# ----------------------------------------------------------------------------- selftest
def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        sys.exit(f"hf_reference selftest failed: {what}")


def check_tables():
    tab = e4m3_table()
    known = {0x7E: 448.0, 0x01: 2.0 ** -9, 0x08: 2.0 ** -6, 0x38: 1.0, 0xB8: -1.0, 0xFE: -448.0}
    check(all(tab[c].item() == v for c, v in known.items()),
          "e4m3: 0x7E=448 0x01=2^-9 0x08=2^-6 0x38=1 0xB8=-1 0xFE=-448")
    check(torch.isnan(tab).nonzero().flatten().tolist() == [0x7F, 0xFF], "e4m3: NaN codes 7F, FF")
    codes = torch.randint(0, 0x7F, (130, 70), dtype=torch.uint8)
    deq = dequantize_fp8(codes, torch.tensor([[2.0], [0.5]]), [128, 128], "probe")
    check(torch.equal(deq[127], tab[codes[127].long()] * 2) and
          torch.equal(deq[128], tab[codes[128].long()] * 0.5), "fp8 block dequant, ragged blocks")
    inv = rope_inv_freq({"rope_scaling": LLAMA3_SCALING}, 16)
    base = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)
    check(inv[0] == base[0] and bool(torch.allclose(inv[3:], base[3:] / 8)) and
          bool((inv[1:3] < base[1:3]).all() and (inv[1:3] > base[1:3] / 8).all()),
          "llama3 rope scaling: high freq kept, low freq / 8, medium smoothed")


def quantize_q_proj(mdir):
    """Store layer 0's q_proj as random E4M3 codes with a 2^-12 scale; check the decode."""
    name, path = "model.layers.0.self_attn.q_proj.weight", os.path.join(mdir, "model.safetensors")
    ts = read_safetensors(path)
    codes = torch.randint(0, 0x7F, ts[name].shape, dtype=torch.uint8)
    codes[0, 0] = 0xFE  # -448: the largest magnitude, negative
    ts[name], ts[name + "_scale_inv"] = ("F8_E4M3", codes), torch.full((1, 1), 2.0 ** -12)
    write_safetensors(path, ts, {"format": "pt"})
    got = load_model(mdir)[1][name]
    check(torch.equal(got, e4m3_table()[codes.long()] * 2.0 ** -12), "fp8 checkpoint weight decode")


def check_model(tmp, name, args, fp8=False):
    mdir, bpath, opath = (os.path.join(tmp, name + s) for s in ("", ".batch", ".out"))
    make_checkpoint(parser().parse_args(["make-checkpoint", mdir] + args))
    if fp8:
        quantize_q_proj(mdir)
    b, t, v = 3, 12, json.load(open(os.path.join(mdir, "config.json")))["vocab_size"]
    rng = np.random.default_rng(7)
    tokens = torch.from_numpy(rng.integers(0, v, (b, t)).astype(np.int32))
    targets = torch.cat([tokens[:, 1:], torch.full((b, 1), -1, dtype=torch.int32)], 1)
    lengths = torch.tensor([t, 9, 5], dtype=torch.int32)
    targets[torch.arange(t)[None, :] >= lengths[:, None] - 1] = -1
    targets[0, 3] = -1
    tokens[2, 5:] = -7  # garbage padding must be ignored
    batch = {"tokens": tokens, "targets": targets, "lengths": lengths}
    write_safetensors(bpath, batch)
    compute_logprobs(mdir, bpath, opath)
    out = read_safetensors(opath)
    logits, lp, tg = out["logits"].double(), out["logprobs"].double(), targets.long()
    check(list(logits.shape) == [b, t, v] and list(lp.shape) == [b, t] and
          bool(torch.isfinite(logits).all() and torch.isfinite(lp).all()) and logits.std() > 0.1,
          f"{name}: shapes, finite, not flat (logit std {logits.std().item():.3f})")
    want = logits.gather(-1, tg.clamp(min=0)[..., None])[..., 0] - logits.logsumexp(-1)
    want = want.masked_fill(tg == -1, 0.0)
    check(bool((want - lp).abs().max() < 1e-4), f"{name}: logprobs = logit - logsumexp(logits)")
    check(bool((lp[tg == -1] == 0).all() and (lp[tg != -1] < 0).all()), f"{name}: -1 gives 0")
    cut = 6  # change every token after position cut: logits up to cut must not move
    tokens[:, cut + 1:] = torch.from_numpy(rng.integers(0, v, (b, t - cut - 1)).astype(np.int32))
    write_safetensors(bpath, batch)
    compute_logprobs(mdir, bpath, opath)
    diff = (read_safetensors(opath)["logits"].double() - logits).abs()
    check(diff[:, :cut + 1].max() < 1e-6 and diff[:, cut + 1:].max() > 1e-3,
          f"{name}: causality (max change up to the cut {diff[:, :cut + 1].max().item():.1e})")


def check_moe(tmp):
    """The qwen3_moe checkpoint check_model wrote (layer 0 in mlp_only_layers): its layout, and
    moe_mlp against a token-by-token routing written with Python's sorted()."""
    mdir = os.path.join(tmp, "qwen3_moe")
    cfg, w = load_model(mdir)
    check("model.layers.0.mlp.gate_proj.weight" in w and "model.layers.0.mlp.gate.weight" not in w
          and "model.layers.1.mlp.gate_proj.weight" not in w
          and list(w["model.layers.1.mlp.gate.weight"].shape) == [8, 64]
          and list(w["model.layers.1.mlp.experts.7.down_proj.weight"].shape) == [64, 32],
          "qwen3_moe: layer 0 dense (mlp_only_layers), layer 1 a router [8, 64] and 8 experts")
    margin = read_safetensors(os.path.join(tmp, "qwen3_moe.out"))["route_margin"]
    check(list(margin.shape) == [3, 12] and bool((margin > 0).all() and (margin <= 1).all()),
          f"qwen3_moe: route_margin in (0, 1] (smallest {margin.min().item():.1e})")
    p, x = "model.layers.1.mlp.", torch.randn(2, 5, 64, dtype=torch.float64)
    router = w[p + "gate.weight"]
    for norm in (False, True):
        got = moe_mlp(dict(cfg, norm_topk_prob=norm), w, p, x)
        want = torch.zeros_like(x)
        for b in range(2):
            for t in range(5):
                probs = torch.softmax(router @ x[b, t], 0).tolist()
                top = sorted(range(8), key=lambda e: -probs[e])[:2]
                total = sum(probs[e] for e in top) if norm else 1.0
                for e in top:
                    want[b, t] += probs[e] / total * dense_mlp(w, f"{p}experts.{e}.", x[b, t])
        check(bool((got - want).abs().max() < 1e-12) and want.abs().max() > 1e-3,
              f"qwen3_moe: the MoE block routes tokens as sorted() does (norm_topk_prob {norm})")


def selftest():
    torch.manual_seed(0)
    check_tables()
    with tempfile.TemporaryDirectory() as tmp:
        check_model(tmp, "llama", ["--arch", "llama", "--dtype", "bf16", "--shards", "2",
                                   "--tie", "0", "--rope-scaling", "1"])
        with open(os.path.join(tmp, "llama", "model.safetensors.index.json")) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
        check(files == [f"model-0000{i}-of-00002.safetensors" for i in (1, 2)], "shard names")
        check_model(tmp, "qwen3", ["--arch", "qwen3", "--dtype", "f16", "--tie", "1"])
        check_model(tmp, "llama_fp8", ["--arch", "llama", "--dtype", "f32"], fp8=True)
        check_model(tmp, "qwen3_moe", ["--arch", "qwen3_moe", "--dtype", "bf16", "--shards", "2",
                                       "--mlp-only-layers", "0"])
        check_moe(tmp)
    print("selftest passed")


# ----------------------------------------------------------------------------- CLI
def parser():
    ap = argparse.ArgumentParser(prog="hf_reference.py", description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make-checkpoint")
    mk.add_argument("out_dir")
    mk.add_argument("--arch", choices=["llama", "qwen2", "qwen3", "qwen3_moe"], required=True)
    mk.add_argument("--dtype", choices=list(DTYPE_ARGS), default="bf16")
    for flag, default in [("shards", 1), ("seed", 0), ("vocab", 300), ("hidden", 64),
                          ("layers", 2), ("heads", 4), ("kv-heads", 2), ("head-dim", 16),
                          ("intermediate", 128), ("tie", 0), ("rope-scaling", 0),
                          ("max-pos", 256), ("experts", 8), ("top-k", 2), ("moe-ff", 32),
                          ("norm-topk", 1), ("sparse-step", 1)]:
        mk.add_argument("--" + flag, type=int, default=default)
    mk.add_argument("--rope-theta", type=float, default=None)
    mk.add_argument("--eps", type=float, default=1e-6)
    mk.add_argument("--mlp-only-layers", default="")
    lp = sub.add_parser("logprobs")
    for name in ("model_dir", "batch", "out"):
        lp.add_argument(name)
    sub.add_parser("e4m3-table").add_argument("out")
    sub.add_parser("selftest")
    return ap


def run(argv):
    a = parser().parse_args(argv)
    if a.cmd == "make-checkpoint":
        make_checkpoint(a)
    elif a.cmd == "logprobs":
        compute_logprobs(a.model_dir, a.batch, a.out)
    elif a.cmd == "e4m3-table":
        write_safetensors(a.out, {"values": e4m3_table().float()})
    else:
        selftest()


def main():
    argv = sys.argv[1:]
    if argv[:2] != ["each", "--"]:
        run(argv)
        return
    command = []
    for word in argv[2:] + [";"]:
        if word != ";":
            command.append(word)
        elif command:
            run(command)
            command = []


if __name__ == "__main__":
    main()
