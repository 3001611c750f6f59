"""Scaled dot-product attention over [B, T, heads, D] tensors, with grouped KV heads."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def repeat_kv(x: torch.Tensor, groups: int) -> torch.Tensor:
    """[B, T, kv_heads, D] -> [B, T, kv_heads * groups, D], each KV head repeated in place."""
    if groups == 1:
        return x
    b, t, h, d = x.shape
    return x[:, :, :, None, :].expand(b, t, h, groups, d).reshape(b, t, h * groups, d)


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float, mask: torch.Tensor | None) -> torch.Tensor:
    """Attention of q [B, Tq, H, D] over k, v [B, Tk, Hkv, D]; mask is boolean, broadcastable to
    [B, H, Tq, Tk] with True = may attend. Returns [B, Tq, H, D]."""
    groups = q.shape[2] // k.shape[2]
    k, v = repeat_kv(k, groups), repeat_kv(v, groups)
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask, scale=scale
    )
    return out.transpose(1, 2)


def causal_mask(query_len: int, key_len: int, device: torch.device) -> torch.Tensor:
    """[Tq, Tk] boolean causal mask for queries that are the last Tq of Tk positions."""
    q_pos = torch.arange(query_len, device=device) + max(key_len - query_len, 0)
    k_pos = torch.arange(key_len, device=device)
    return k_pos[None, :] <= q_pos[:, None]
