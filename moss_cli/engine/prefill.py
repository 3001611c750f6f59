"""Prefilling the prompts admitted at one step: several per forward, so the backbone's weights are
read once for all of them, where that leaves every prompt's numbers as they are alone (which
prompts share a forward and where each sits: `numerics.layout.prefill_groups` and `prefill_spans`)."""

from __future__ import annotations

import torch

from ..model.talker import MossTTSLocal
from ..numerics.layout import PrefillLayout, prefill_groups, prefill_spans
from .kv_cache import GroupedPrefill, KVPool


def prefill(
    model: MossTTSLocal, pool: KVPool, prompts: list[torch.Tensor], slots: list[int], layout: PrefillLayout | None
) -> list[torch.Tensor]:
    """Store each prompt's keys and values in its pool slot; return each prompt's last backbone
    hidden state [H]."""
    hidden: list[torch.Tensor | None] = [None] * len(prompts)
    for members, laid_out in prefill_groups([int(p.shape[0]) for p in prompts], layout):
        spans, width = prefill_spans([int(prompts[i].shape[0]) for i in members], layout if laid_out else None)
        cfg, device = model.cfg, prompts[members[0]].device
        rows = torch.full((1, width, 1 + cfg.n_vq), cfg.audio_pad_code, dtype=torch.long, device=device)
        rows[..., 0] = cfg.pad_token_id  # padding rows: read by the products only, stored nowhere
        positions = torch.zeros(1, width, dtype=torch.long, device=device)
        for i, (start, stop) in zip(members, spans):
            rows[0, start:stop] = prompts[i]
            positions[0, start:stop] = torch.arange(stop - start, device=device)
        cache = GroupedPrefill(pool, [slots[i] for i in members], spans)
        out = model.backbone(model.embed(rows), positions, cache)
        cache.advance()
        for i, (_, stop) in zip(members, spans):
            hidden[i] = out[0, stop - 1]
    return hidden
