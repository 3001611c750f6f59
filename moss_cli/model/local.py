"""The local depth transformer (GPT-2 style) that decodes the codebooks of one frame.

Pre-LayerNorm blocks with a fused `c_attn`, interleaved-pair (GPT-J) RoPE, and an MLP
`fc_in -> act -> fc_out`. It has no token embedding: its inputs are the backbone's hidden state
(position 0) and the audio embeddings of the codes sampled so far in the frame.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .attention import attend, causal_mask
from .config import LocalConfig
from .layers import LayerNorm, Linear, activation, apply_interleaved, interleaved_angles


class LocalKV:
    """One local layer's keys and values [B, T, heads, D] of the frame so far. Eagerly, each new
    position is copied into buffers with room for a whole frame, where concatenating would copy
    everything so far at every position; a compiled graph concatenates (it keeps no buffers)."""

    def __init__(self, room: int) -> None:
        self.room = room  # positions the buffers are made for
        self.keys: torch.Tensor | None = None  # positions [0, length) hold the frame's keys so far
        self.values: torch.Tensor | None = None
        self.length = 0

    def extend(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Append k, v [B, t, heads, D]; return every key and value so far."""
        start, end = self.length, self.length + k.shape[1]
        self.length = end
        if torch.compiler.is_compiling():
            if self.keys is not None:
                k, v = torch.cat([self.keys, k], dim=1), torch.cat([self.values, v], dim=1)
            self.keys, self.values = k, v
            return k, v
        if self.keys is None or end > self.keys.shape[1]:
            b, _, heads, dim = k.shape
            room = max(self.room, end)
            keys, values = k.new_empty(b, room, heads, dim), v.new_empty(b, room, heads, dim)
            if self.keys is not None:
                keys[:, :start], values[:, :start] = self.keys[:, :start], self.values[:, :start]
            self.keys, self.values = keys, values
        self.keys[:, start:end], self.values[:, start:end] = k, v
        return self.keys[:, :end], self.values[:, :end]


LocalPast = list[LocalKV]


class LocalAttention(nn.Module):
    def __init__(self, cfg: LocalConfig, layer: int) -> None:
        super().__init__()
        self.num_heads = cfg.num_heads
        self.head_dim = cfg.hidden_size // cfg.num_heads
        self.c_attn = Linear(cfg.hidden_size, 3 * cfg.hidden_size)
        self.c_proj = Linear(cfg.hidden_size, cfg.hidden_size)
        scale = 1.0
        if cfg.scale_attn_weights:
            scale /= self.head_dim**0.5
        if cfg.scale_attn_by_inverse_layer_idx:
            scale /= float(layer + 1)
        self.scale = scale

    def forward(self, x, cos, sin, past: LocalKV):
        b, t, hidden = x.shape
        qkv = self.c_attn(x).view(b, t, 3, self.num_heads, self.head_dim)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]
        if cos is not None:  # q and k rotated together
            qk = apply_interleaved(qk, cos, sin)
        q, k = qk.unbind(2)
        k, v = past.extend(k, v)
        # A single query is the last position: it sees every key, so it needs no mask.
        out = attend(q, k, v, self.scale, causal_mask(t, k.shape[1], x.device) if t > 1 else None)
        return self.c_proj(out.reshape(b, t, hidden))


class LocalMLP(nn.Module):
    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.fc_in = Linear(cfg.hidden_size, cfg.inner_size)
        self.fc_out = Linear(cfg.inner_size, cfg.hidden_size)
        self.act = activation(cfg.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc_out(self.act(self.fc_in(x)))


class LocalBlock(nn.Module):
    def __init__(self, cfg: LocalConfig, layer: int) -> None:
        super().__init__()
        self.ln_1 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.attn = LocalAttention(cfg, layer)
        self.ln_2 = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        self.mlp = LocalMLP(cfg)

    def forward(self, x, cos, sin, past: LocalKV):
        x = x + self.attn(self.ln_1(x), cos, sin, past)
        return x + self.mlp(self.ln_2(x))


class LocalTransformer(nn.Module):
    """State-dict prefix `local_transformer.`: h.{i}, ln_f (and wpe for absolute positions)."""

    def __init__(self, cfg: LocalConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.h = nn.ModuleList(LocalBlock(cfg, i) for i in range(cfg.num_layers))
        self.ln_f = LayerNorm(cfg.hidden_size, eps=cfg.layer_norm_eps)
        if cfg.position_embedding == "absolute":
            self.wpe = nn.Embedding(cfg.max_positions, cfg.hidden_size)
        self._rope_tables: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}  # see _angles

    def forward(self, x: torch.Tensor, start: int, past: LocalPast | None = None) -> tuple[torch.Tensor, LocalPast]:
        """x [B, T, H] at local positions start..start+T-1 -> (ln_f output [B, T, H], the past
        extended by these positions: `past` itself, or a new one)."""
        t = x.shape[1]
        cos = sin = None
        if self.cfg.position_embedding == "rope":
            cos, sin = self._angles(start, t, x.device, x.dtype)
        else:
            x = x + self.wpe(torch.arange(start, start + t, device=x.device))
        if past is None:  # a new frame
            past = [LocalKV(self.cfg.max_positions) for _ in self.h]
        for block, kv in zip(self.h, past):
            x = block(x, cos, sin, kv)
        return self.ln_f(x), past

    def _angles(self, start: int, t: int, device: torch.device, dtype: torch.dtype):
        """cos / signed sin [T, 1, 1, head_dim] (for q and k [B, T, 2, heads, D]) of positions
        start..start+T-1. A frame visits the same few positions over and over, so the table is
        computed once per device and dtype (the same elementwise ops, so the same bits)."""

        def angles(positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            head_dim = self.cfg.hidden_size // self.cfg.num_heads
            cos, sin = interleaved_angles(positions, head_dim, self.cfg.rope_base, dtype)
            return cos[:, None, None], sin[:, None, None]

        if torch.compiler.is_compiling():  # a graph computes them inside (no side effects)
            return angles(torch.arange(start, start + t, device=device))
        key = (device, dtype)
        table = self._rope_tables.get(key)
        if table is None or table[0].shape[0] < start + t:
            # Plain tensors (not inference tensors), usable whether or not later calls track gradients.
            with torch.inference_mode(False), torch.no_grad():
                table = self._rope_tables[key] = angles(torch.arange(max(2 * (start + t), 16), device=device))
        return table[0][start : start + t], table[1][start : start + t]
