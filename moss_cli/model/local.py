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

LocalPast = list[tuple[torch.Tensor, torch.Tensor]]


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

    def forward(self, x, cos, sin, past: tuple[torch.Tensor, torch.Tensor] | None):
        b, t, hidden = x.shape
        qkv = self.c_attn(x).view(b, t, 3, self.num_heads, self.head_dim)
        qk, v = qkv[:, :, :2], qkv[:, :, 2]
        if cos is not None:  # q and k rotated together
            qk = apply_interleaved(qk, cos, sin)
        q, k = qk.unbind(2)
        if past is not None:
            k, v = torch.cat([past[0], k], dim=1), torch.cat([past[1], v], dim=1)
        # A single query is the last position: it sees every key, so it needs no mask.
        out = attend(q, k, v, self.scale, causal_mask(t, k.shape[1], x.device) if t > 1 else None)
        return self.c_proj(out.reshape(b, t, hidden)), (k, v)


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

    def forward(self, x, cos, sin, past):
        attn_out, present = self.attn(self.ln_1(x), cos, sin, past)
        x = x + attn_out
        return x + self.mlp(self.ln_2(x)), present


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
        """x [B, T, H] at local positions start..start+T-1 -> (ln_f output [B, T, H], new past)."""
        t = x.shape[1]
        cos = sin = None
        if self.cfg.position_embedding == "rope":
            cos, sin = self._angles(start, t, x.device, x.dtype)
        else:
            x = x + self.wpe(torch.arange(start, start + t, device=x.device))
        present: LocalPast = []
        for i, block in enumerate(self.h):
            x, kv = block(x, cos, sin, None if past is None else past[i])
            present.append(kv)
        return self.ln_f(x), present

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
