"""The reference talker's loops, kept exactly: what the engine is compared against.

`sample` draws as the reference does, with `torch.multinomial` from one shared stream (the global
RNG unless a generator is given), so a row's draws depend on the rows drawn before it: the
behaviour the audit must be able to reproduce as its negative control. `generate_padded` is the
reference's padded-batch loop behind `Talker.generate(reference_loop=True)`: the whole batch is
prefilled together, then every step runs the backbone on one new row per request; a row that
stops gets `[pad, pad codes]` rows with attention mask 0 from then on.
"""

from __future__ import annotations

from typing import Sequence

import torch

from ..model.attention import attend, causal_mask
from ..model.talker import MossTTSLocal
from ..sampling_params import HeadSampling
from .frame import STOP_HEAD, choose_codes, choose_stop, start_frame

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
    """One token per row of logits [B, V]: repetition penalty -> temperature -> top-k -> top-p ->
    `torch.multinomial`. `params[i]` and `histories[i]` belong to row i."""
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


@torch.inference_mode()
def generate_padded(
    model: MossTTSLocal,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    *,
    max_new_frames: int,
    do_sample: bool,
    audio: HeadSampling,
    stop: HeadSampling,
    generators: Generators = None,
) -> list[torch.Tensor]:
    cfg = model.cfg
    batch, device = input_ids.shape[0], input_ids.device
    mask = attention_mask.to(device=device, dtype=torch.bool)
    rows = input_ids
    cache = PaddedBatchCache()
    finished = torch.zeros(batch, dtype=torch.bool, device=device)
    frames: list[torch.Tensor] = []
    lengths = torch.zeros(batch, dtype=torch.long, device=device)

    for _ in range(max_new_frames):
        history = torch.stack(frames, dim=1) if frames else None  # [B, F, n_vq]

        def choose(codebook: int, logits: torch.Tensor) -> torch.Tensor:
            if codebook == STOP_HEAD:
                return sample(logits, [stop] * batch, do_sample=do_sample, generators=generators)
            histories = None if history is None else [history[i, :, codebook] for i in range(batch)]
            return sample(logits, [audio] * batch, do_sample=do_sample, histories=histories, generators=generators)

        positions = (mask.long().cumsum(-1) - 1).masked_fill(~mask, 0)[:, -rows.shape[1] :]
        cache.key_mask = mask
        hidden = model.backbone(model.embed(rows), positions, cache)[:, -1]
        local_hidden, past = start_frame(model, hidden)
        stops = choose_stop(model, local_hidden, choose)
        continuing = ~stops & ~finished
        finished |= stops
        if not bool(continuing.any()):
            break
        codes = choose_codes(model, local_hidden, past, choose)
        frame = codes.masked_fill(~continuing[:, None], cfg.audio_pad_code)
        frames.append(frame)
        lengths += continuing.long()

        rows = torch.full((batch, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=device)
        rows[:, 0, 0] = torch.where(continuing, cfg.audio_assistant_slot_token_id, cfg.pad_token_id)
        rows[:, 0, 1:] = frame
        mask = torch.cat([mask, continuing[:, None]], dim=1)

    stacked = torch.stack(frames, dim=1) if frames else torch.zeros(batch, 0, cfg.n_vq, dtype=torch.long, device=device)
    return [stacked[i, : int(lengths[i])].cpu() for i in range(batch)]
