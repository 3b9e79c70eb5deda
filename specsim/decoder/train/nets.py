"""The three trained drafters as torch modules (CPU, float32). Their arithmetic follows the numba
decoder's: RMSNorm, rotary embedding on interleaved pairs (x[0::2], x[1::2]) as `reference.rope`,
grouped-query attention (query head h reads kv head h // (H/G)), SwiGLU. The vocabulary projection is
the target's frozen LM head (its tied embedding) restricted to `vocab` (the ids drafts are drawn from,
see `fit.choose_vocabulary`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True, slots=True, kw_only=True)
class LayerShape:
    d_model: int
    n_head: int
    n_kv_head: int
    n_ff: int
    rope_base: float
    rms_eps: float

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope(x, positions, base: float):
    """x (B, L, H, E); positions (B, L) or (L,): rotate interleaved pairs as reference.rope."""
    e = x.shape[-1]
    inv = base ** (-torch.arange(0, e, 2, dtype=torch.float64) / e)
    ang = positions.to(torch.float64)[..., None] * inv  # (..., L, E/2)
    c, s = torch.cos(ang).to(x.dtype)[..., None, :], torch.sin(ang).to(x.dtype)[..., None, :]
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * c - b * s, a * s + b * c], dim=-1).flatten(-2)


class DecoderLayer(nn.Module):
    """One Llama block; parameter names follow the GGUF tensor names (attn_q, ..., ffn_down)."""

    def __init__(self, s: LayerShape):
        super().__init__()
        self.s = s
        d, e = s.d_model, s.head_dim
        self.attn_norm, self.ffn_norm = RMSNorm(d, s.rms_eps), RMSNorm(d, s.rms_eps)
        self.attn_q = nn.Linear(d, s.n_head * e, bias=False)
        self.attn_k = nn.Linear(d, s.n_kv_head * e, bias=False)
        self.attn_v = nn.Linear(d, s.n_kv_head * e, bias=False)
        self.attn_output = nn.Linear(s.n_head * e, d, bias=False)
        self.ffn_gate = nn.Linear(d, s.n_ff, bias=False)
        self.ffn_up = nn.Linear(d, s.n_ff, bias=False)
        self.ffn_down = nn.Linear(s.n_ff, d, bias=False)

    def forward(self, x, positions):
        s = self.s
        b, n, _ = x.shape
        h = self.attn_norm(x)
        q = rope(self.attn_q(h).view(b, n, s.n_head, s.head_dim), positions, s.rope_base)
        k = rope(self.attn_k(h).view(b, n, s.n_kv_head, s.head_dim), positions, s.rope_base)
        v = self.attn_v(h).view(b, n, s.n_kv_head, s.head_dim)
        rep = s.n_head // s.n_kv_head
        k, v = k.repeat_interleave(rep, dim=2), v.repeat_interleave(rep, dim=2)
        att = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                             is_causal=True, scale=1 / math.sqrt(s.head_dim))
        x = x + self.attn_output(att.transpose(1, 2).reshape(b, n, -1))
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class DraftLM(nn.Module):
    """A small Llama (width d_model < the target's) whose token embedding is the target's, projected
    (`token_embd_proj`, D_target -> d), and whose logits are the target's LM head rows `vocab` applied
    to `output_proj` (d -> D_target) of its final hidden state. Only the projections, the blocks and
    the final norm are trained (and shipped)."""

    def __init__(self, s: LayerShape, n_layer: int, target_embd: torch.Tensor, head: torch.Tensor):
        super().__init__()
        d_t = target_embd.shape[1]
        self.s = s
        self.register_buffer("target_embd", target_embd, persistent=False)  # (V, D_target), frozen
        self.register_buffer("head", head, persistent=False)  # (N_vocab_subset, D_target), frozen
        self.token_embd_proj = nn.Linear(d_t, s.d_model, bias=False)
        self.blocks = nn.ModuleList(DecoderLayer(s) for _ in range(n_layer))
        self.output_norm = RMSNorm(s.d_model, s.rms_eps)
        self.output_proj = nn.Linear(s.d_model, d_t, bias=False)
        nn.init.normal_(self.token_embd_proj.weight, std=1 / math.sqrt(d_t))
        for blk in self.blocks:  # GPT-2's scaled init of the residual outputs
            for lin in (blk.attn_output, blk.ffn_down):
                nn.init.normal_(lin.weight, std=0.02 / math.sqrt(2 * n_layer))

    def forward(self, tokens):
        x = self.token_embd_proj(self.target_embd[tokens])
        pos = torch.arange(tokens.shape[1])
        for blk in self.blocks:
            x = blk(x, pos)
        return self.output_proj(self.output_norm(x)) @ self.head.T  # (B, L, N)


class MedusaHeads(nn.Module):
    """Cai et al. 2024 (Medusa-1): head k (k = 1..K) reads the target's last hidden state h_t and
    predicts token t + 1 + k through one residual block, h + SiLU(W_k h + b_k), and the target's
    frozen LM head. W_k starts at zero, so each head starts as the LM head itself."""

    def __init__(self, d: int, n_heads: int, head: torch.Tensor):
        super().__init__()
        self.register_buffer("head", head, persistent=False)
        self.w = nn.Parameter(torch.zeros(n_heads, d, d))
        self.b = nn.Parameter(torch.zeros(n_heads, d))

    def forward(self, h):  # h (..., D) -> logits (..., K, N)
        z = h[..., None, :] + F.silu(torch.einsum("kij,...j->...ki", self.w, h) + self.b)
        return z @ self.head.T


class EagleHead(nn.Module):
    """Li et al. 2024 (EAGLE): the pair (target feature at t, embedding of token t+1) -> fc -> one
    decoder layer (causal over the pairs of the sequence) -> predicted feature at t+1; tokens through
    the target's frozen LM head. Features here are the target's final-norm hidden states (what its LM
    head reads), so the head ends with its own RMSNorm (`output_norm`) before the LM head."""

    def __init__(self, s: LayerShape, target_embd: torch.Tensor, head: torch.Tensor):
        super().__init__()
        d = s.d_model
        self.register_buffer("target_embd", target_embd, persistent=False)
        self.register_buffer("head", head, persistent=False)
        self.fc = nn.Linear(2 * d, d, bias=True)
        self.block = DecoderLayer(s)
        self.output_norm = RMSNorm(d, s.rms_eps)

    def forward(self, features, next_tokens, positions):
        """features (B, L, D): target features at t; next_tokens (B, L): token t+1; positions (L,):
        the position of token t+1. Returns (predicted features (B, L, D), logits (B, L, N))."""
        x = self.fc(torch.cat([features, self.target_embd[next_tokens]], dim=-1))
        f = self.output_norm(self.block(x, positions))
        return f, f @ self.head.T
