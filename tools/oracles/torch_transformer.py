#!/usr/bin/python3
"""PyTorch oracle of fp8rl's transformer: the same Llama-3 / Qwen3 / Qwen3-MoE model in plain torch ops.

Usage (run by tests/model/torch_oracle_test.cc with Debian's /usr/bin/python3):
  torch_transformer.py [--mode fp32,bf16,fp8,bf16attn] [--steps 10] [--lr 1e-3] [--weight-decay 0.1]
                       [--max-grad-norm 1.0] [--min-router-margin 0] JOB_DIR [JOB_DIR ...]
Several job directories share one start of Python and torch (about a second).

Inputs, in each JOB_DIR:
  checkpoint/config.json, checkpoint/model.safetensors   written by fp8rl's save_checkpoint
  batch.safetensors  I32 tokens, targets, positions [B, T] (target -1: not scored), I32 lengths
                     [B], F32 coeff [B, T] (per-token coefficients of the log-prob loss)
Output, one file per mode, JOB_DIR/MODE.safetensors (all F32):
  logprobs [B, T]      log-prob of each target (0 where the target is -1)
  loss []              L = sum_n coeff[n] * logprobs[n]
  grad.NAME            dL/dNAME for every parameter, under its HF name
  sft_losses [steps]   mean NLL over the scored tokens before each of `steps` AdamW steps
  final.NAME           every parameter after those steps
  MoE models only, per MoE layer L:
  experts.L [B*T, k]   the experts of each row in the first forward (that of logprobs and grad),
                       slot by slot, padding rows included
  step_experts.L [steps, B*T, k]  the same in the forward of each AdamW step
  router_margin.L []   the smallest gap between the k-th and (k+1)-th router probability over
                       the real rows in the first forward; the script fails when it is below
                       --min-router-margin (a near tie that fp8rl could break the other way)
  step_router_margin.L []  the same over the steps' forwards (reported, not checked)

Modes reproduce fp8rl's precision policy (src/model/transformer.cc, linear.cc):
  fp32  plain float32 everywhere (PrecisionPolicy::fp32(), FP32 LM head)
  bf16  activations rounded to bfloat16 at the points where fp8rl rounds them; linear operands
        rounded to bfloat16 with float32 accumulation, and dY rounded before dgrad and wgrad
  fp8   as bf16, but the seven linears of every layer run the blockwise FP8 recipe
        (docs/recipe.md sections 3-4), emulated here in float ops; the LM head stays BF16
  bf16attn  bf16 with policy.attention_precision: bf16 (kernels/attention/attention.h): P rounded to
        bfloat16 after the softmax (whose backward uses the rounded P), the gradient reaching
        the attention output (dO) and the one reaching q k^T (dS, scale included) rounded

Mixture of Experts (model_type qwen3_moe; src/model/moe.cc, moe_routing.cc): layer l's MLP is an
MoE block where (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers. The router
is a float32 linear on the (mode-rounded) normed input and is never rounded or quantized; softmax
in float32, the top k by a stable sort (ties to the lower expert index, as fp8rl: the padding
rows, whose input is zero, tie exactly), the k weights divided by their sum with norm_topk_prob.
Each expert is a SwiGLU of the mode's linears over its rows in ascending token order (fp8rl's
grouping, which fixes the FP8 wgrad's 128x1 token blocks); the k outputs are combined slot by
slot from zero in float32 and the sum is rounded as one activation. Autograd gives the router its
gradient through the combine weights only (the choice is piecewise constant).

Debian has no `safetensors` package, so the format (u64 LE header length, JSON header, data)
is read and written directly.
"""
import argparse
import json
import math
import os
import struct

import numpy as np
import torch

# ----------------------------------------------------------------------------------------------
# safetensors

_NUMPY_DTYPES = {"F32": "<f4", "I32": "<i4"}


def read_safetensors(path):
    """{name: torch tensor} for the F32 and I32 tensors of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    header.pop("__metadata__", None)
    data = blob[8 + n:]
    out = {}
    for name, entry in header.items():
        begin, end = entry["data_offsets"]
        if entry["dtype"] not in _NUMPY_DTYPES:
            raise SystemExit(f"{path}: tensor '{name}' has dtype {entry['dtype']}, expected F32 or I32")
        array = np.frombuffer(data[begin:end], dtype=_NUMPY_DTYPES[entry["dtype"]]).reshape(entry["shape"])
        out[name] = torch.from_numpy(array.copy())
    return out


def write_safetensors(path, tensors):
    """Writes {name: float32 tensor} as F32."""
    header, chunks, offset = {}, [], 0
    for name, t in tensors.items():
        raw = t.detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(raw)]}
        chunks.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path + ".tmp", "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))
    os.replace(path + ".tmp", path)


# ----------------------------------------------------------------------------------------------
# BF16 rounding. torch's float32 -> bfloat16 conversion rounds to nearest even, like fp8rl's
# (pinned by tests/numerics/bf16_torch_oracle_test.cc). The backward is the identity: fp8rl's
# backward never rounds these gradients (only a linear's dY, see the linear functions below).


class RoundBf16(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.to(torch.bfloat16).to(torch.float32)

    @staticmethod
    def backward(ctx, dy):
        return dy


def bf16(x):
    return x.to(torch.bfloat16).to(torch.float32)


# ----------------------------------------------------------------------------------------------
# E4M3 ("FN", OCP FP8 v1.0): round to nearest even, saturating at +-448, NaN kept.

E4M3_MAX = 448.0
FLT_MAX = float(np.finfo(np.float32).max)
_POW2_MIN = -9
_POW2 = torch.tensor([2.0**k for k in range(_POW2_MIN, 7)], dtype=torch.float64)  # exact powers of two


def round_e4m3(x):
    """The E4M3 value nearest to each element of float32 `x` (ties to even), as float32."""
    a = x.to(torch.float64).abs()  # float64 holds every float32 exactly; the steps below are exact
    _, e = torch.frexp(a)  # a = m * 2^e with m in [0.5, 1)
    # E4M3 keeps 3 mantissa bits, so the grid step in [2^(e-1), 2^e) is 2^(e-4); below the
    # smallest normal 2^-6 the grid is the subnormal step 2^-9 (e clamped at -5). Above 2^9
    # everything saturates, so the step there only has to be large enough (e clamped at 10).
    step = _POW2[(torch.clamp(e, min=-5, max=10) - 4 - _POW2_MIN).long()]
    r = torch.round(a / step) * step  # torch.round: halves to even, i.e. to the even code
    r = torch.clamp(r, max=E4M3_MAX)  # satfinite: beyond 448 and Inf saturate
    r = torch.where(torch.isnan(a), a, r)
    return torch.copysign(r, x.to(torch.float64)).to(torch.float32)


def e4m3_decode_bits(code):
    """Value of an E4M3 code from the OCP bit-field definition S.EEEE.MMM, bias 7."""
    sign = -1.0 if code & 0x80 else 1.0
    exponent, mantissa = (code >> 3) & 0xF, code & 0x7
    if exponent == 0xF and mantissa == 0x7:
        return math.nan
    if exponent == 0:
        return sign * math.ldexp(mantissa / 8.0, -6)
    return sign * math.ldexp(1.0 + mantissa / 8.0, exponent - 7)


def check_e4m3_rounding():
    """round_e4m3 against the bit-field definition: every value, every midpoint, specials."""
    codes = [c for c in range(128) if not math.isnan(e4m3_decode_bits(c))]  # non-negative, increasing
    values = [e4m3_decode_bits(c) for c in codes]
    probes, want = [], []
    for c in range(256):
        v = e4m3_decode_bits(c)
        probes.append(v)
        want.append(v)
    for (c0, v0), (c1, v1) in zip(zip(codes, values), zip(codes[1:], values[1:])):
        mid = (v0 + v1) / 2  # exact in float32 (5 significant bits)
        tie = v0 if c0 % 2 == 0 else v1
        below, above = np.nextafter(np.float32(mid), np.float32(0)), np.nextafter(np.float32(mid), np.float32(1e9))
        for sign in (1.0, -1.0):
            probes += [sign * mid, sign * float(below), sign * float(above)]
            want += [sign * tie, sign * v0, sign * v1]
    for v, w in [(449.0, 448.0), (464.0, 448.0), (1e30, 448.0), (math.inf, 448.0), (-math.inf, -448.0),
                 (2.0**-10, 0.0), (-(2.0**-11), -0.0), (3e-38, 0.0)]:
        probes.append(v)
        want.append(w)
    got = round_e4m3(torch.tensor(probes, dtype=torch.float32)).tolist()
    for p, g, w in zip(probes, got, want):
        same = (math.isnan(g) and math.isnan(w)) or (g == w and math.copysign(1, g) == math.copysign(1, w))
        if not same:
            raise SystemExit(f"E4M3 rounding self-check failed: round({p!r}) = {g!r}, expected {w!r}")


# ----------------------------------------------------------------------------------------------
# Blockwise quantization (docs/recipe.md section 3) and the FP8 GEMM (section 4).


def quantize_blocks(x, block_rows, block_cols):
    """x [R, C] float32 -> (E4M3 values [R, C] float32, dequantization scales [ceil(R/br), ceil(C/bc)]).

    qs = 448 / amax (float32 division); qs = 1 for a block whose amax is 0 or not finite or that
    holds a NaN; qs = FLT_MAX if the division overflows. Codes e4m3(x * qs), scales s = 1 / qs.
    Edge blocks are padded with zeros, which never raise a block's amax.
    """
    R, C = x.shape
    Rb, Cb = -(-R // block_rows), -(-C // block_cols)
    padded = torch.zeros(Rb * block_rows, Cb * block_cols, dtype=torch.float32)
    padded[:R, :C] = x
    blocks = padded.view(Rb, block_rows, Cb, block_cols)
    amax = blocks.abs().amax(dim=(1, 3))  # [Rb, Cb]; NaN if the block holds a NaN
    qs = torch.tensor(E4M3_MAX, dtype=torch.float32) / amax
    qs = torch.where(torch.isinf(qs) & (amax > 0), torch.tensor(FLT_MAX, dtype=torch.float32), qs)
    qs = torch.where((amax == 0) | ~torch.isfinite(amax), torch.ones_like(qs), qs)
    codes = round_e4m3(blocks * qs[:, None, :, None]).view_as(padded)[:R, :C]
    return codes, torch.ones_like(qs) / qs


def fp8_gemm_nt(a, a_scale, b, b_scale):
    """C[M, N] = A[M, K] . B[N, K]^T from E4M3 values and per-row, per-128-slice scales.

    a_scale [M, S], b_scale [N, S] with S = ceil(K / 128). For each 128-wide slice of K the exact
    products are summed in float32, the slice sum is multiplied by (s_a * s_b), and added to a
    float32 accumulator.
    """
    K = a.shape[1]
    acc = torch.zeros(a.shape[0], b.shape[0], dtype=torch.float32)
    for s, k0 in enumerate(range(0, K, 128)):
        part = a[:, k0:k0 + 128] @ b[:, k0:k0 + 128].T
        acc = acc + part * (a_scale[:, s:s + 1] * b_scale[:, s][None, :])
    return acc


def rows_of_blocks(scale, block_rows, n_rows):
    """Expands a [Rb, S] block-scale grid to one row of scales per matrix row: [n_rows, S]."""
    return scale.repeat_interleave(block_rows, dim=0)[:n_rows]


# ----------------------------------------------------------------------------------------------
# Linear layers y = x W^T, one autograd Function per precision (src/model/linear.cc).


class Bf16Linear(torch.autograd.Function):
    """x and W rounded to BF16, float32 accumulation; dY rounded to BF16 before dgrad and wgrad."""

    @staticmethod
    def forward(ctx, x, w):
        xb, wb = bf16(x), bf16(w)
        ctx.save_for_backward(xb, wb)
        return xb @ wb.T

    @staticmethod
    def backward(ctx, dy):
        xb, wb = ctx.saved_tensors
        dyb = bf16(dy)
        return dyb @ wb, dyb.T @ xb


class Fp8Linear(torch.autograd.Function):
    """Blockwise FP8: fprop X 1x128 . W 128x128; dgrad dY 1x128 . W (the same codes, transposed);
    wgrad dY and X quantized 128x1 along tokens, afresh from the high-precision tensors."""

    @staticmethod
    def forward(ctx, x, w):
        N = w.shape[0]
        xq, xs = quantize_blocks(x, 1, 128)
        wq, ws = quantize_blocks(w, 128, 128)
        ctx.save_for_backward(x, wq, ws)
        return fp8_gemm_nt(xq, xs, wq, rows_of_blocks(ws, 128, N))

    @staticmethod
    def backward(ctx, dy):
        x, wq, ws = ctx.saved_tensors
        K = x.shape[1]
        dyq, dys = quantize_blocks(dy, 1, 128)
        # W^T [K, N]: a 128x128 grid is the same grid after transposition.
        dx = fp8_gemm_nt(dyq, dys, wq.T.contiguous(), rows_of_blocks(ws.T, 128, K))
        # 128x1 blocks along tokens are 1x128 blocks of the transposes dY^T [N, M] and X^T [K, M].
        dytq, dyts = quantize_blocks(dy.T.contiguous(), 1, 128)
        xtq, xts = quantize_blocks(x.T.contiguous(), 1, 128)
        return dx, fp8_gemm_nt(dytq, dyts, xtq, xts)


class RoundGradBf16(torch.autograd.Function):
    """The identity forward; the backward rounds the gradient to bfloat16 (dO, dS)."""

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, dy):
        return bf16(dy)


class SoftmaxBf16(torch.autograd.Function):
    """softmax rounded to bfloat16; its backward uses the rounded probabilities, as fp8rl's
    attention backward reads the P its forward saved."""

    @staticmethod
    def forward(ctx, x):
        p = bf16(torch.softmax(x, dim=-1))
        ctx.save_for_backward(p)
        return p

    @staticmethod
    def backward(ctx, dp):
        (p,) = ctx.saved_tensors
        return p * (dp - (p * dp).sum(dim=-1, keepdim=True))


class Policy:
    """Where fp8rl rounds, and how its linears compute, in one precision mode."""

    def __init__(self, mode):
        self.bf16_attention = mode == "bf16attn"
        self.mode = "bf16" if mode == "bf16attn" else mode

    def round(self, x):
        return x if self.mode == "fp32" else RoundBf16.apply(x)

    def linear(self, x, w):
        """A transformer linear (q, k, v, o, gate, up, down): its output is a BF16 activation."""
        if self.mode == "fp32":
            return x @ w.T
        f = Fp8Linear if self.mode == "fp8" else Bf16Linear
        return self.round(f.apply(x, w))

    def lm_head(self, x, w):
        """The LM head: FP32 in the fp32 mode, else BF16 operands; logits are not rounded."""
        return x @ w.T if self.mode == "fp32" else Bf16Linear.apply(x, w)


# ----------------------------------------------------------------------------------------------
# The model, one function per layer, in the order of Transformer::forward.


def load_config(checkpoint):
    with open(os.path.join(checkpoint, "config.json")) as f:
        return json.load(f)


def rope_tables(cfg, max_positions):
    """cos, sin [max_positions, D/2]: angles in float64, rounded once to float32 (as fp8rl's
    table), frequencies theta^(-2i/D) with HF's llama3 rope_scaling when configured."""
    D = cfg["head_dim"]
    inv_freq = cfg["rope_theta"] ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    rs = cfg.get("rope_scaling")
    if rs:
        factor, low, high = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old_len = rs["original_max_position_embeddings"]
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > old_len / low, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= old_len / high) & (wavelen <= old_len / low)
        inv_freq = torch.where(medium, smoothed, scaled)
    angles = torch.arange(max_positions, dtype=torch.float64)[:, None] * inv_freq[None, :]
    return torch.cos(angles).to(torch.float32), torch.sin(angles).to(torch.float32)


def embedding(policy, table, tokens):
    return policy.round(table[tokens])


def rms_norm(x, w, eps):
    # The mean of squares in float64, as fp8rl's kernel does, so that both sides see the same
    # float32 1/rms; the output is (x * rstd) * w in float32.
    x64 = x.to(torch.float64)
    rstd = (1.0 / torch.sqrt((x64 * x64).mean(dim=-1, keepdim=True) + eps)).to(torch.float32)
    return (x * rstd) * w


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def rope(x, cos, sin):
    """HF "rotate_half" RoPE. x [N, H, D]; cos, sin [N, D/2] at each row's position."""
    c = torch.cat((cos, cos), dim=-1)[:, None, :]
    s = torch.cat((sin, sin), dim=-1)[:, None, :]
    return x * c + rotate_half(x) * s


def causal_attention(q, k, v, B, T, bf16_attention=False):
    """q [N, Hq, D], k and v [N, Hkv, D] with N = B*T -> [N, Hq*D]. Query head h reads kv head
    h // (Hq / Hkv). Softmax in float32 over positions s <= t of the same sequence; with
    bf16_attention, the rounding points of policy.attention_precision: bf16."""
    Hq, Hkv, D = q.shape[1], k.shape[1], q.shape[2]
    q = q.view(B, T, Hq, D).transpose(1, 2)
    k = k.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    v = v.view(B, T, Hkv, D).transpose(1, 2).repeat_interleave(Hq // Hkv, dim=1)
    raw = q @ k.transpose(-1, -2)
    if bf16_attention:
        raw = RoundGradBf16.apply(raw)  # dS (the scale is applied before, in the backward)
    scores = raw * (1.0 / math.sqrt(D))
    future = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
    masked = scores.masked_fill(future, -math.inf)
    probs = SoftmaxBf16.apply(masked) if bf16_attention else torch.softmax(masked, dim=-1)
    out = probs @ v
    if bf16_attention:
        out = RoundGradBf16.apply(out)  # dO
    return out.transpose(1, 2).reshape(B * T, Hq * D)


def swiglu(g, u):
    return torch.nn.functional.silu(g) * u


def attention_block(policy, cfg, p, prefix, x, cos, sin, B, T, real):
    """x_mid = x + o(attention(rope(qnorm(q(h))), rope(knorm(k(h))), v(h))), h = norm(x)."""
    N, D, eps = x.shape[0], cfg["head_dim"], cfg["rms_norm_eps"]
    Hq, Hkv = cfg["num_attention_heads"], cfg["num_key_value_heads"]
    h = policy.round(rms_norm(x, p[prefix + "input_layernorm.weight"], eps))
    q = policy.linear(h, p[prefix + "self_attn.q_proj.weight"]).view(N, Hq, D)
    k = policy.linear(h, p[prefix + "self_attn.k_proj.weight"]).view(N, Hkv, D)
    v = policy.linear(h, p[prefix + "self_attn.v_proj.weight"]).view(N, Hkv, D)
    if cfg["model_type"] in ("qwen3", "qwen3_moe"):  # q/k-norm
        q = rms_norm(q, p[prefix + "self_attn.q_norm.weight"], eps)
        k = rms_norm(k, p[prefix + "self_attn.k_norm.weight"], eps)
    q = policy.round(rope(q, cos, sin))
    k = policy.round(rope(k, cos, sin))
    # Padding rows are kept at exactly zero (as fp8rl does) so they never enter a block's amax.
    att = policy.round(causal_attention(q, k, v, B, T, policy.bf16_attention)) * real
    return policy.round(x + policy.linear(att, p[prefix + "self_attn.o_proj.weight"]))


def mlp_block(policy, cfg, p, prefix, x):
    """x_next = x + down(swiglu(gate(h), up(h))), h = norm(x)."""
    h = policy.round(rms_norm(x, p[prefix + "post_attention_layernorm.weight"], cfg["rms_norm_eps"]))
    g = policy.linear(h, p[prefix + "mlp.gate_proj.weight"])
    u = policy.linear(h, p[prefix + "mlp.up_proj.weight"])
    s = policy.round(swiglu(g, u))
    return policy.round(x + policy.linear(s, p[prefix + "mlp.down_proj.weight"]))


def is_moe_layer(cfg, layer):
    """HF's Qwen3MoeDecoderLayer rule, as ModelConfig::is_moe_layer."""
    if cfg.get("model_type") != "qwen3_moe" or cfg.get("num_experts", 0) <= 0:
        return False
    step = cfg.get("decoder_sparse_step") or 1
    return (layer + 1) % step == 0 and layer not in (cfg.get("mlp_only_layers") or [])


def moe_block(policy, cfg, p, prefix, x, real, routing):
    """x_next = x + sum_j w_j expert_{e_j}(h), h = norm(x), experts and weights from the router.

    Appends (experts [N, k], smallest k-th vs (k+1)-th probability gap over the real rows) to
    `routing`."""
    E, k = cfg["num_experts"], cfg["num_experts_per_tok"]
    h = policy.round(rms_norm(x, p[prefix + "post_attention_layernorm.weight"], cfg["rms_norm_eps"]))
    probs = torch.softmax(h @ p[prefix + "mlp.gate.weight"].T, dim=-1)  # FP32 router, never rounded
    ranked, order = torch.sort(probs.detach(), dim=-1, descending=True, stable=True)
    experts = order[:, :k]
    margin = float((ranked[:, k - 1] - ranked[:, k])[real[:, 0] > 0].min()) if k < E else math.inf
    routing.append((experts, margin))
    w = probs.gather(1, experts)  # [N, k], slot order
    if cfg.get("norm_topk_prob", False):
        w = w / w.sum(dim=-1, keepdim=True)
    out = torch.zeros(x.shape[0], k, x.shape[1], dtype=torch.float32)
    for e in range(E):
        # The expert's (token, slot) pairs, tokens ascending (a token takes an expert once).
        tokens, slots = (experts == e).nonzero(as_tuple=True)
        if tokens.numel() == 0:
            continue  # no gradient for an expert no token chose (fp8rl's is zero too)
        xe = h[tokens]
        g = policy.linear(xe, p[prefix + f"mlp.experts.{e}.gate_proj.weight"])
        u = policy.linear(xe, p[prefix + f"mlp.experts.{e}.up_proj.weight"])
        s = policy.round(swiglu(g, u))
        out = out.index_put((tokens, slots), policy.linear(s, p[prefix + f"mlp.experts.{e}.down_proj.weight"]))
    y = torch.zeros_like(x)
    for j in range(k):  # slot by slot from zero, in float32
        y = y + w[:, j:j + 1] * out[:, j]
    return policy.round(x + policy.round(y))


def token_logprobs(logits, targets):
    """log softmax(logits)[target] per row, 0 where the target is -1."""
    lp = torch.log_softmax(logits, dim=-1).gather(1, targets.clamp(min=0)[:, None])[:, 0]
    return torch.where(targets >= 0, lp, torch.zeros_like(lp))


def forward(policy, cfg, p, batch, cos_table, sin_table, routing):
    """Log-probs [B*T] of the batch's targets; each MoE layer appends its routing to `routing`."""
    B, T = batch["tokens"].shape
    tokens = batch["tokens"].reshape(-1).long()
    positions = batch["positions"].reshape(-1).long()
    cos, sin = cos_table[positions], sin_table[positions]
    lengths = batch["lengths"].reshape(-1).long()
    real = (torch.arange(T)[None, :] < lengths[:, None]).reshape(-1, 1).to(torch.float32)
    x = embedding(policy, p["model.embed_tokens.weight"], tokens) * real
    for layer in range(cfg["num_hidden_layers"]):
        prefix = f"model.layers.{layer}."
        x = attention_block(policy, cfg, p, prefix, x, cos, sin, B, T, real)
        if is_moe_layer(cfg, layer):
            x = moe_block(policy, cfg, p, prefix, x, real, routing)
        else:
            x = mlp_block(policy, cfg, p, prefix, x)
    h = policy.round(rms_norm(x, p["model.norm.weight"], cfg["rms_norm_eps"]))
    head = p["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else p["lm_head.weight"]
    return token_logprobs(policy.lm_head(h, head), batch["targets"].reshape(-1).long())


# ----------------------------------------------------------------------------------------------
# Training: the coefficient-weighted log-prob loss with its gradients, and AdamW steps.


def clip_grad_norm(params, max_norm):
    """fp8rl's clipping (src/model/optimizer.cc): the global norm in float64, and when it exceeds
    max_norm every gradient is multiplied by the float32 factor max_norm / norm (torch's
    clip_grad_norm_ adds 1e-6 to the norm, so it is not used)."""
    norm = math.sqrt(sum(float((g.grad.to(torch.float64) ** 2).sum()) for g in params))
    if max_norm > 0 and norm > max_norm:
        factor = torch.tensor(max_norm / norm, dtype=torch.float32)
        for g in params:
            g.grad.mul_(factor)
    return norm


def run_mode(mode, cfg, weights, batch, args):
    policy = Policy(mode)
    p = {name: torch.nn.Parameter(t.clone()) for name, t in weights.items()}
    cos, sin = rope_tables(cfg, cfg["max_position_embeddings"])
    out = {}

    coeff = batch["coeff"].reshape(-1)
    routing = []  # (experts, margin) of every MoE layer in every forward, in order
    lp = forward(policy, cfg, p, batch, cos, sin, routing)
    moe_layers = [layer for layer in range(cfg["num_hidden_layers"]) if is_moe_layer(cfg, layer)]
    for layer, (experts, margin) in zip(moe_layers, routing):
        if margin < args.min_router_margin:
            raise SystemExit(f"mode {mode}, MoE layer {layer}: the k-th and (k+1)-th router probabilities of a "
                             f"real row are {margin:.3g} apart, below --min-router-margin "
                             f"{args.min_router_margin:g}: a near tie that fp8rl could break the other way "
                             f"(change the weights or the batch)")
        out[f"experts.{layer}"] = experts.to(torch.float32)
        out[f"router_margin.{layer}"] = torch.tensor(margin, dtype=torch.float32)
    loss = (coeff.to(torch.float64) * lp.to(torch.float64)).sum()
    loss.backward()
    out["logprobs"] = lp.detach().view(batch["tokens"].shape)
    out["loss"] = loss.detach().to(torch.float32).reshape(())
    for name, t in p.items():
        out["grad." + name] = t.grad.clone() if t.grad is not None else torch.zeros_like(t)

    # AdamW on the SFT loss. Weight decay applies to matrices only (embeddings, projections, LM
    # head), as ParamInfo::decay in src/model/params.cc; clipping happens before the update.
    for t in p.values():
        t.grad = torch.zeros_like(t)  # fp8rl's AdamW updates (and decays) a tensor with no gradient
    matrices = [t for t in p.values() if t.dim() == 2]
    vectors = [t for t in p.values() if t.dim() == 1]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": args.weight_decay},
                             {"params": vectors, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.999), eps=1e-8)
    scored = batch["targets"].reshape(-1) >= 0
    losses = []
    for _ in range(args.steps):
        opt.zero_grad(set_to_none=False)
        lp = forward(policy, cfg, p, batch, cos, sin, routing)
        nll = -(lp.to(torch.float64) * scored).sum() / scored.sum()
        nll.backward()
        losses.append(float(nll))
        clip_grad_norm(list(p.values()), args.max_grad_norm)
        opt.step()
    out["sft_losses"] = torch.tensor(losses, dtype=torch.float32)
    for i, layer in enumerate(moe_layers):
        steps = routing[i + len(moe_layers)::len(moe_layers)]
        if steps:
            out[f"step_experts.{layer}"] = torch.stack([e for e, _ in steps]).to(torch.float32)
            out[f"step_router_margin.{layer}"] = torch.tensor(min(m for _, m in steps), dtype=torch.float32)
    for name, t in p.items():
        out["final." + name] = t.detach().clone()
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("jobs", nargs="+", metavar="JOB_DIR")
    parser.add_argument("--mode", default="fp32,bf16,fp8", help="comma-separated: fp32, bf16, fp8, bf16attn")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--weight-decay", type=float, default=0.1)
    parser.add_argument("--max-grad-norm", type=float, default=1.0)
    parser.add_argument("--min-router-margin", type=float, default=0.0,
                        help="MoE: fail when the k-th and (k+1)-th router probabilities of a real row are closer")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic sums; the model is tiny
    modes = args.mode.split(",")
    for mode in modes:
        if mode not in ("fp32", "bf16", "fp8", "bf16attn"):
            raise SystemExit(f"unknown mode '{mode}' (expected fp32, bf16, fp8 or bf16attn)")

    check_e4m3_rounding()
    for job in args.jobs:
        cfg = load_config(os.path.join(job, "checkpoint"))
        weights = read_safetensors(os.path.join(job, "checkpoint", "model.safetensors"))
        batch = read_safetensors(os.path.join(job, "batch.safetensors"))
        for mode in modes:
            write_safetensors(os.path.join(job, mode + ".safetensors"), run_mode(mode, cfg, weights, batch, args))


if __name__ == "__main__":
    main()
