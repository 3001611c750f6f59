"""Prefilling the prompts admitted at one step: several per forward, so the backbone's weights are
read once for all of them, where that leaves every prompt's numbers as they are alone."""

from __future__ import annotations

import torch

from ..model.talker import MossTTSLocal
from ..numerics.layout import PrefillLayout
from .kv_cache import GroupedPrefill, KVPool


def plan_groups(lengths: list[int], layout: PrefillLayout | None) -> list[tuple[list[int], bool]]:
    """(indices of the prompts sharing a forward, whether it is laid out by `layout`) per forward;
    prompts fill forwards in input order.
    A prompt's treatment depends only on its own length: one longer than a forward (or any, without
    a layout) has a forward of its own, unpadded; the others start at a multiple of the unit in a
    forward padded to a multiple of the layout's step, wherever they land."""
    groups: list[tuple[list[int], bool]] = []
    current: list[int] = []
    used = 0
    for i, length in enumerate(lengths):
        if layout is None or layout.padded(length) > layout.rows:
            groups.append(([i], False))
            continue
        start = -(-used // layout.unit) * layout.unit
        if current and layout.padded(start + length) > layout.rows:
            groups.append((current, True))
            current, start = [], 0
        current.append(i)
        used = start + length
    if current:
        groups.append((current, True))
    return groups


def prefill(
    model: MossTTSLocal, pool: KVPool, prompts: list[torch.Tensor], slots: list[int], layout: PrefillLayout | None
) -> list[torch.Tensor]:
    """Store each prompt's keys and values in its pool slot; return each prompt's last backbone
    hidden state [H]."""
    hidden: list[torch.Tensor | None] = [None] * len(prompts)
    for members, laid_out in plan_groups([int(p.shape[0]) for p in prompts], layout):
        unit = layout.unit if laid_out else 1
        spans, width = [], 0
        for i in members:
            start = -(-width // unit) * unit
            spans.append((start, start + int(prompts[i].shape[0])))
            width = spans[-1][1]
        if laid_out:  # one of the row counts the layout allows (in batch-invariant mode, verified)
            width = layout.padded(width)
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
