"""The peer model of fp8rl's benchmarks: the same Llama-3 / Qwen3 decoder as src/model (RMSNorm,
grouped-query attention with "rotate half" RoPE, SwiGLU MLP, tied embeddings by default), written
the way a PyTorch user would write it: nn.Linear layers, eager mode, no custom kernels.

Shared by torch_train_step.py (training tokens/s) and torch_decode.py (KV-cached decode tokens/s).
Weights are random (N(0, 0.02)); only the speed is compared, not the values.
"""
import math

import torch
import torch.nn.functional as F

# The attention the peer runs: PyTorch's fused scaled_dot_product_attention where it exists, else
# the eager softmax(q k^T) v.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
ATTENTION = "sdpa" if HAS_SDPA else "eager"


def add_model_arguments(parser):
    """The architecture flags; fp8rl's benchmark passes its ModelConfig through them."""
    parser.add_argument("--vocab", type=int, required=True)
    parser.add_argument("--d-model", type=int, required=True)
    parser.add_argument("--layers", type=int, required=True)
    parser.add_argument("--heads", type=int, required=True)
    parser.add_argument("--kv-heads", type=int, required=True)
    parser.add_argument("--head-dim", type=int, required=True)
    parser.add_argument("--d-ff", type=int, required=True)
    parser.add_argument("--max-seq-len", type=int, required=True)
    parser.add_argument("--rope-theta", type=float, default=10000.0)
    parser.add_argument("--qk-norm", action="store_true")
    parser.add_argument("--untied", action="store_true", help="separate LM head (default: tied)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight.to(x.dtype)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class Block(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        C, D = a.d_model, a.head_dim
        self.Hq, self.Hkv, self.D = a.heads, a.kv_heads, D
        self.attn_norm, self.mlp_norm = RMSNorm(C), RMSNorm(C)
        self.q = torch.nn.Linear(C, a.heads * D, bias=False)
        self.k = torch.nn.Linear(C, a.kv_heads * D, bias=False)
        self.v = torch.nn.Linear(C, a.kv_heads * D, bias=False)
        self.o = torch.nn.Linear(a.heads * D, C, bias=False)
        self.gate = torch.nn.Linear(C, a.d_ff, bias=False)
        self.up = torch.nn.Linear(C, a.d_ff, bias=False)
        self.down = torch.nn.Linear(a.d_ff, C, bias=False)
        self.q_norm = RMSNorm(D) if a.qk_norm else None
        self.k_norm = RMSNorm(D) if a.qk_norm else None

    def qkv(self, h, cos, sin):
        """q [B, Hq, T, D], k and v [B, Hkv, T, D] with RoPE at the rows' positions (cos, sin [T, D])."""
        B, T, _ = h.shape
        q = self.q(h).view(B, T, self.Hq, self.D).transpose(1, 2)
        k = self.k(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        v = self.v(h).view(B, T, self.Hkv, self.D).transpose(1, 2)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q = q * cos.to(q.dtype) + rotate_half(q) * sin.to(q.dtype)
        k = k * cos.to(k.dtype) + rotate_half(k) * sin.to(k.dtype)
        return q, k, v

    def attend(self, q, k, v, mask):
        """Softmax attention of q [B, Hq, T, D] over k, v [B, Hkv, S, D]; mask [T, S] (True = hidden)."""
        group = self.Hq // self.Hkv
        if group > 1:
            k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        B, _, T, _ = q.shape
        if HAS_SDPA:  # the fused kernel where this PyTorch has it (2.0 on); 1.13 has not
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else ~mask)
            return out.transpose(1, 2).reshape(B, T, self.Hq * self.D)
        scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(self.D))
        if mask is not None:
            scores = scores.masked_fill(mask, -math.inf)
        probs = torch.softmax(scores.float(), dim=-1).to(v.dtype)
        return (probs @ v).transpose(1, 2).reshape(B, T, self.Hq * self.D)

    def mlp(self, x):
        h = self.mlp_norm(x)
        return self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(torch.nn.Module):
    def __init__(self, a):
        super().__init__()
        self.embed = torch.nn.Embedding(a.vocab, a.d_model)
        self.blocks = torch.nn.ModuleList([Block(a) for _ in range(a.layers)])
        self.norm = RMSNorm(a.d_model)
        self.lm_head = torch.nn.Linear(a.d_model, a.vocab, bias=False) if a.untied else None
        inv_freq = a.rope_theta ** (-torch.arange(0, a.head_dim, 2, dtype=torch.float64) / a.head_dim)
        angles = torch.arange(a.max_seq_len, dtype=torch.float64)[:, None] * inv_freq[None, :]
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", torch.cos(angles).float(), persistent=False)
        self.register_buffer("sin", torch.sin(angles).float(), persistent=False)
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for p in self.parameters():
                if p.dim() == 2:
                    p.normal_(0.0, 0.02, generator=generator)

    def logits(self, h):
        head = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return h @ head.to(h.dtype).T

    def forward(self, tokens):
        """Training forward: logits [B, T, V] of right-aligned full sequences, causal."""
        T = tokens.shape[1]
        x = self.embed(tokens)
        cos, sin = self.cos[:T], self.sin[:T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for blk in self.blocks:
            q, k, v = blk.qkv(blk.attn_norm(x), cos, sin)
            x = x + blk.o(blk.attend(q, k, v, mask))
            x = x + blk.mlp(x)
        return self.logits(self.norm(x))
