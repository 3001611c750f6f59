"""Turning logits into tokens: repetition penalty -> temperature -> top-k -> top-p -> draw.

The order and the float32 cast follow the reference talker. Where the random numbers come from
is explicit: one shared stream (the global RNG or a single generator, drawn for the whole batch
at once, as the reference does), or one generator per row (reproducible whatever the batch).
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..sampling_params import HeadSampling

Generators = torch.Generator | Sequence[torch.Generator | None] | None


def apply_repetition_penalty(scores: torch.Tensor, history: torch.Tensor | None, penalty: float) -> torch.Tensor:
    """scores [V]; tokens seen in `history` are divided by `penalty` (multiplied when negative)."""
    if history is None or penalty == 1.0 or history.numel() == 0:
        return scores
    seen = torch.unique(history)
    seen = seen[(seen >= 0) & (seen < scores.shape[-1])]
    if seen.numel() == 0:
        return scores
    picked = scores.index_select(0, seen)
    picked = torch.where(picked < 0, picked * penalty, picked / penalty)
    return scores.clone().scatter_(0, seen, picked)


def filter_top_k_top_p(scores: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """scores [..., V] with everything outside top-k, then outside the top-p nucleus, set to -inf."""
    if 0 < top_k < scores.shape[-1]:
        kth = torch.topk(scores, top_k, dim=-1).values[..., -1, None]
        scores = scores.masked_fill(scores < kth, -torch.inf)
    if 0.0 < top_p < 1.0:
        sorted_scores, order = torch.sort(scores, descending=True, dim=-1)
        cumulative = torch.softmax(sorted_scores, dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative > top_p
        drop_sorted[..., 1:] = drop_sorted[..., :-1].clone()  # keep the token that crosses top_p
        drop_sorted[..., 0] = False
        drop = torch.zeros_like(scores, dtype=torch.bool).scatter_(-1, order, drop_sorted)
        scores = scores.masked_fill(drop, -torch.inf)
    return scores


def sample(
    logits: torch.Tensor,
    params: Sequence[HeadSampling],
    *,
    do_sample: bool,
    histories: Sequence[torch.Tensor | None] | None = None,
    generators: Generators = None,
) -> torch.Tensor:
    """One token per row of logits [B, V]. `params[i]` and `histories[i]` belong to row i."""
    scores = logits.float()
    if histories is not None and any(p.repetition_penalty != 1.0 for p in params):
        scores = torch.stack(
            [
                apply_repetition_penalty(scores[i], histories[i], params[i].repetition_penalty)
                for i in range(scores.shape[0])
            ]
        )
    if not do_sample:
        return torch.argmax(scores, dim=-1)
    for p in params:
        if p.temperature <= 0:
            raise ValueError("temperature must be positive when sampling")
    per_row = isinstance(generators, (list, tuple))
    uniform = all(p == params[0] for p in params)
    if not per_row and uniform:
        # One shared stream, one draw for the whole batch: the reference behaviour.
        p = params[0]
        probs = torch.softmax(filter_top_k_top_p(scores / p.temperature, p.top_k, p.top_p), dim=-1)
        return torch.multinomial(probs, 1, generator=generators).squeeze(-1)
    out = torch.empty(scores.shape[0], dtype=torch.long, device=scores.device)
    for i, p in enumerate(params):
        gen = generators[i] if per_row else generators
        row = filter_top_k_top_p(scores[i : i + 1] / p.temperature, p.top_k, p.top_p)
        out[i] = torch.multinomial(torch.softmax(row, dim=-1), 1, generator=gen)[0, 0]
    return out
