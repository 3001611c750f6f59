"""Attention in fixed shapes, so a row's numbers do not depend on its neighbours or its chunk.

- The decode step's attention (`decode_attention`): each row attends over its own keys only, in
  fixed blocks of `KEY_BLOCK` keys combined with an online softmax; a block a row has no keys in
  (a longer neighbour's) leaves its running max, sum and output exactly as they were.
- The codec's causal sliding-window attention (`aligned_attention`): queries in tiles of
  `QUERY_TILE` aligned to absolute positions, so a step's row is the same decoded whole or in chunks.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .kernels import as_dtype
from .tiles import KEY_BLOCK

QUERY_TILE = 64  # the codec's attention query tile in batch-invariant mode


class KeyBlocks:
    """What every layer of one decode step shares: which key blocks each row has keys in.

    `positions` [n]: where each row's new key goes (its keys are positions 0..positions[i]); the
    step reads `width` keys per row (a multiple of KEY_BLOCK). Keys past a row's own are -inf
    before the softmax, and from block `shared` on some row may have no keys (those blocks' sums
    are then added per row, where the row has keys). Block 0 holds every row's first key, so
    `shared` is at least 1; how wide the step reads and where `shared` lies change no bit of a
    row: a block it has no keys in adds nothing either way."""

    def __init__(self, positions: torch.Tensor, width: int, kv_heads: int, shared: int = 1) -> None:
        self.positions, self.blocks, self.width, self.shared = positions, width // KEY_BLOCK, width, shared
        device = positions.device
        valid = torch.arange(self.width, device=device)[None] <= positions[:, None]  # [n, width]
        # One product per (row, KV head): masks repeated over a row's KV heads.
        valid = valid.repeat_interleave(kv_heads, dim=0)[:, None]  # [n * heads, 1, width]
        self.key_bias = torch.zeros(valid.shape, device=device).masked_fill(~valid, -torch.inf)
        self.touched = valid.unflatten(-1, (self.blocks, KEY_BLOCK)).any(dim=-1).unbind(-1)  # per block [n * heads, 1]

    @classmethod
    def covering(cls, positions: torch.Tensor, lengths: list[int], real: list[bool], kv_heads: int) -> KeyBlocks:
        """As few blocks as hold the longest row's keys, given the rows' `lengths` on the host
        (`real[i]`: False for an idle row, whose output is ignored): every real row has keys in the
        blocks before the shortest one's last."""
        width = -(-(max(lengths) + 1) // KEY_BLOCK) * KEY_BLOCK
        shared = min(n for n, r in zip(lengths, real) if r) // KEY_BLOCK + 1
        return cls(positions, width, kv_heads, shared)


def decode_attention(
    q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float, blocks: KeyBlocks
) -> torch.Tensor:
    """One new position per row: q [n, 1, heads, D] over each row's own keys and values
    [n, kv_heads, blocks.width, D] (any dtype; the softmax never runs below float32) -> [n, 1, heads, D]."""
    n, _, heads, dim = q.shape
    kv_heads = keys.shape[1]
    batch = n * kv_heads  # one product per (row, KV head): its query group against its own keys
    exact = torch.float64 if q.dtype == torch.float64 else torch.float32
    # head h reads KV head h // groups
    query = as_dtype(q.reshape(batch, heads // kv_heads, dim), exact)
    width = blocks.width
    row_keys, row_values = (as_dtype(x, exact).reshape(batch, width, dim) for x in (keys, values))
    # Each score is one dot product over D: its bits do not depend on how many keys there are.
    scores = torch.bmm(query, row_keys.transpose(1, 2)) * scale + blocks.key_bias  # [batch, groups, width]
    best = scores.amax(dim=-1, keepdim=True)  # exact whatever the width
    weights = torch.exp(scores - best)
    # Sums run over fixed KEY_BLOCK-wide blocks, then across blocks in order: a block a row has no
    # keys in adds nothing (skipped), so a longer neighbour changes no bit of this row. Each
    # block's product reads its values in place (one product over all blocks copied them).
    sums = weights.unflatten(-1, (blocks.blocks, KEY_BLOCK)).sum(dim=-1).unbind(-1)  # per block [batch, groups]
    parts = map(torch.bmm, weights.split(KEY_BLOCK, dim=-1), row_values.split(KEY_BLOCK, dim=1))
    total, out = sums[0], next(parts)  # out: [batch, groups, D]
    for j, part in enumerate(parts, start=1):
        if j < blocks.shared:  # every real row has keys here
            total, out = total + sums[j], out + part
        else:
            used = blocks.touched[j]
            total = torch.where(used, total + sums[j], total)
            out = torch.where(used[..., None], out + part, out)
    return as_dtype(out / total[..., None], q.dtype).reshape(n, 1, heads, dim)


def aligned_attention(q, k, v, q0: int, k0: int, context: int) -> torch.Tensor:
    """Causal sliding-window attention computed in query tiles aligned to absolute positions.

    Every tile covers queries [s, s + TILE) with s a multiple of TILE, over the key span
    [max(0, s - context + 1), s + TILE): its shape depends only on s. Keys inside the span but not
    available (already dropped from a streaming cache, or not yet decoded) are zeros and masked; a
    query never attends to them, so its row comes out bitwise the same whether the sequence is
    decoded whole or chunk by chunk. (Keys before position 0 never exist in either, so the span
    leaves them out: a short clip does not pay for a full window.)"""
    b, h, n, d = q.shape
    first, last = q0, q0 + n  # absolute query positions
    outs = []
    for s in range(first - first % QUERY_TILE, last, QUERY_TILE):
        lo, hi = max(s, first), min(s + QUERY_TILE, last)
        tile_q = q.new_zeros(b, h, QUERY_TILE, d)
        tile_q[:, :, lo - s : hi - s] = q[:, :, lo - q0 : hi - q0]
        start = max(0, s - context + 1)  # absolute position of the span's first key
        span = s + QUERY_TILE - start
        tile_k, tile_v = k.new_zeros(b, h, span, d), v.new_zeros(b, h, span, d)
        a, z = max(start, k0), min(start + span, k0 + k.shape[2])
        tile_k[:, :, a - start : z - start] = k[:, :, a - k0 : z - k0]
        tile_v[:, :, a - start : z - start] = v[:, :, a - k0 : z - k0]
        q_pos = torch.arange(s, s + QUERY_TILE, device=q.device)[:, None]
        k_pos = torch.arange(start, start + span, device=q.device)[None, :]
        delta = q_pos - k_pos
        mask = (delta >= 0) & (delta < context) & (k_pos >= a) & (k_pos < z)
        mask |= ~mask.any(-1, keepdim=True)  # padding query rows: any finite output, discarded below
        out = F.scaled_dot_product_attention(tile_q, tile_k, tile_v, attn_mask=mask)
        outs.append(out[:, :, lo - s : hi - s])
    return torch.cat(outs, dim=2)
