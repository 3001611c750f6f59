"""Qwen3 decoder (the talker's global backbone): QK-norm, rotate-half RoPE, SwiGLU MLP.

Attention goes through a cache object supplied by the caller (the engine owns KV caches and
batching); the cache stores new keys/values and returns the attention output.
"""

from __future__ import annotations

from typing import Protocol

import torch
import torch.nn as nn

from .attention import attend, causal_mask
from .config import BackboneConfig
from .layers import (
    Linear,
    RMSNorm,
    StackedLinear,
    activation,
    apply_rotate_half,
    rms_normalized,
    rotate_half_angles,
)


class AttentionCache(Protocol):
    def attend(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
        """Store k, v [B, T, Hkv, D] for `layer` and return attention of q [B, T, H, D]."""


class NoCache:
    """Causal attention over the given sequence only (a full forward without a cache)."""

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        return attend(q, k, v, scale, causal_mask(q.shape[1], k.shape[1], q.device))


class Qwen3Attention(nn.Module):
    def __init__(self, cfg: BackboneConfig, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        self.scale = cfg.head_dim**-0.5
        bias = cfg.attention_bias
        # Queries, keys and values in one product (the checkpoint's q_proj, k_proj and v_proj).
        kv = cfg.num_kv_heads * cfg.head_dim
        parts = [("q_proj", cfg.num_heads * cfg.head_dim), ("k_proj", kv), ("v_proj", kv)]
        self.qkv_proj = StackedLinear(cfg.hidden_size, parts, bias=bias)
        self.o_proj = Linear(cfg.num_heads * cfg.head_dim, cfg.hidden_size, bias=bias)
        self.q_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(cfg.head_dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache: AttentionCache) -> torch.Tensor:
        b, t, _ = x.shape
        heads, kv_heads, dim = self.num_heads, self.num_kv_heads, self.head_dim
        qk, v = self.qkv_proj(x).view(b, t, heads + 2 * kv_heads, dim).split([heads + kv_heads, kv_heads], dim=2)
        # Query and key heads normalised and rotated in one pass (half the small ops of a decode
        # step's attention): every head is a row of its own, so each gets the bits it gets apart.
        scale = torch.cat([self.q_norm.weight.expand(heads, dim), self.k_norm.weight.expand(kv_heads, dim)])
        qk = apply_rotate_half(scale * rms_normalized(qk, self.q_norm.eps), cos, sin)
        q, k = (part.contiguous() for part in qk.split([heads, kv_heads], dim=2))
        out = cache.attend(self.layer, q, k, v, self.scale)
        return self.o_proj(out.reshape(b, t, self.num_heads * self.head_dim))


class Qwen3MLP(nn.Module):
    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        # The gate and up projections in one product (the checkpoint's gate_proj and up_proj).
        parts = [("gate_proj", cfg.intermediate_size), ("up_proj", cfg.intermediate_size)]
        self.gate_up_proj = StackedLinear(cfg.hidden_size, parts, bias=False)
        self.down_proj = Linear(cfg.intermediate_size, cfg.hidden_size, bias=False)
        self.act = activation(cfg.hidden_act)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.gate_up_proj(x).chunk(2, dim=-1)
        return self.down_proj(self.act(gate) * up)


class Qwen3Layer(nn.Module):
    def __init__(self, cfg: BackboneConfig, layer: int) -> None:
        super().__init__()
        self.self_attn = Qwen3Attention(cfg, layer)
        self.mlp = Qwen3MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(self, x, cos, sin, cache: AttentionCache) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, cache)
        return x + self.mlp(self.post_attention_layernorm(x))


class Qwen3Backbone(nn.Module):
    """State-dict prefix `transformer.`: embed_tokens, layers.{i}, norm."""

    def __init__(self, cfg: BackboneConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(Qwen3Layer(cfg, i) for i in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, embeds: torch.Tensor, positions: torch.Tensor, cache: AttentionCache | None = None
    ) -> torch.Tensor:
        """embeds [B, T, H], positions [B, T] -> final-normed hidden states [B, T, H]."""
        cache = cache if cache is not None else NoCache()
        cos, sin = rotate_half_angles(positions, self.cfg.head_dim, self.cfg.rope_theta, embeds.dtype)
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)  # [B, T, 1, D]: the same angles for every head
        x = embeds
        for layer in self.layers:
            x = layer(x, cos, sin, cache)
        return self.norm(x)
