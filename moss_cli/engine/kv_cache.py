"""KV caches the engine hands to the backbone's attention."""

from __future__ import annotations

import torch

from ..model.attention import attend, causal_mask


class PaddedBatchCache:
    """One cache for a left-padded batch that grows by one row per step (the reference layout).

    `key_mask` [B, L] marks real positions; set it to the mask of all positions (cached + new)
    before each forward. Pads are never attended to by real positions. Each position may always
    attend to itself, so a padding query never has an empty softmax (its output is discarded).
    """

    def __init__(self) -> None:
        self.keys: dict[int, torch.Tensor] = {}
        self.values: dict[int, torch.Tensor] = {}
        self.key_mask: torch.Tensor | None = None

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        if layer in self.keys:
            k = torch.cat([self.keys[layer], k], dim=1)
            v = torch.cat([self.values[layer], v], dim=1)
        self.keys[layer], self.values[layer] = k, v
        tq, tk = q.shape[1], k.shape[1]
        mask = causal_mask(tq, tk, q.device)[None, None] & self.key_mask[:, None, None, :]
        own = torch.zeros(tq, tk, dtype=torch.bool, device=q.device)
        own[torch.arange(tq), torch.arange(tk - tq, tk)] = True
        return attend(q, k, v, scale, mask | own[None, None])
