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


class RequestCache:
    """One request's backbone KV cache, preallocated for its whole prompt + frame budget."""

    def __init__(
        self, num_layers: int, capacity: int, num_kv_heads: int, head_dim: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        shape = (num_layers, capacity, num_kv_heads, head_dim)
        self.keys = torch.empty(shape, device=device, dtype=dtype)
        self.values = torch.empty(shape, device=device, dtype=dtype)
        self.length = 0  # positions stored in every layer after a completed forward

    @property
    def capacity(self) -> int:
        return self.keys.shape[1]

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Write k, v [T, Hkv, D] after the cached positions; return all keys/values [1, L, Hkv, D]."""
        end = self.length + k.shape[0]
        if end > self.capacity:
            raise RuntimeError(f"KV cache overflow: {end} positions > capacity {self.capacity}")
        self.keys[layer, self.length : end] = k
        self.values[layer, self.length : end] = v
        return self.keys[layer, None, :end], self.values[layer, None, :end]


class RequestBatch:
    """Attention for a batch of requests, each over its own cache (no padding, no shared softmax).

    Rows never see each other's keys, and a row's attention is computed exactly as it would be
    alone, whatever the batch: its neighbours' lengths cannot change its reduction.
    """

    def __init__(self, caches: list[RequestCache | None]) -> None:
        self.caches = caches  # None: an idle row (padding), whose attention output is zero

    def attend(self, layer: int, q, k, v, scale: float) -> torch.Tensor:
        outs = []
        t = q.shape[1]
        for i, cache in enumerate(self.caches):
            if cache is None:
                outs.append(torch.zeros_like(q[i : i + 1]))
                continue
            keys, values = cache.store(layer, k[i], v[i])
            mask = causal_mask(t, keys.shape[1], q.device) if t > 1 else None
            outs.append(attend(q[i : i + 1], keys, values, scale, mask))
        return torch.cat(outs, dim=0)

    def advance(self, steps: int) -> None:
        for cache in self.caches:
            if cache is not None:
                cache.length += steps
