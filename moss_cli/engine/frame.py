"""What a decode step computes on the device, asking the host nothing: a frame through the local
transformer (the stop head, then every codebook, each head drawn by the block sampler), and the
whole step (the frame, then every row's next position through the backbone). The engine's
runners (step.py) call these eager, compiled or captured as a graph; the reference loop and the
tests call the frame's parts.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from ..model.local import LocalPast
from ..model.talker import STOP, MossTTSLocal
from .kv_cache import BlockedDecode, KVPool
from .sampling import RowParams, sample_rows

STOP_HEAD = -1  # the codebook index of the stop head, for choosers and the logits hook
# (codebook, logits [B, V]) -> codes [B]; codebook -1 is the stop head (logits [B, 2]).
Chooser = Callable[[int, torch.Tensor], torch.Tensor]


def start_frame(model: MossTTSLocal, hidden: torch.Tensor) -> tuple[torch.Tensor, LocalPast]:
    """Local position 0 from the backbone's last hidden state [B, H] -> (local hidden [B, H], past)."""
    out, past = model.local(hidden.unsqueeze(1), 0)
    return out[:, -1], past


def choose_stop(model: MossTTSLocal, local_hidden: torch.Tensor, choose: Chooser) -> torch.Tensor:
    """[B] bool: True where the stop head picks audio_end."""
    return choose(STOP_HEAD, model.stop_logits(local_hidden)).eq(STOP)


def choose_codes(model: MossTTSLocal, local_hidden: torch.Tensor, past: LocalPast, choose: Chooser) -> torch.Tensor:
    """Sample codebooks 0..n_vq-1 in order, each feeding the next local position -> codes [B, n_vq]."""
    n_vq = model.cfg.n_vq
    codes = []
    for k in range(n_vq):
        c = choose(k, model.audio_logits(k, local_hidden))
        codes.append(c)
        if k + 1 < n_vq:
            out, past = model.local(model.code_embedding(k, c), k + 1, past)
            local_hidden = out[:, -1]
    return torch.stack(codes, dim=-1)


def decode_frame(model: MossTTSLocal, hidden: torch.Tensor, choose: Chooser) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole frame for a block: hidden [B, H] -> (stop [B] bool, codes [B, n_vq]). Every row gets
    codes, also rows whose stop head fired (the caller ignores them)."""
    local_hidden, past = start_frame(model, hidden)
    stops = choose_stop(model, local_hidden, choose)
    return stops, choose_codes(model, local_hidden, past, choose)


@dataclass(frozen=True)
class FrameSampler:
    """A block's sampler for one frame: each row's uniforms for every head, drawn from its own
    stream before the frame, and per-row sampling parameters; a row's tokens then depend only on
    its logits and these. `draw` is a `Chooser`."""

    uniforms: torch.Tensor  # [rows, 1 + n_vq]: the stop head, then codebooks 0..n_vq-1
    stop: RowParams
    audio: RowParams
    seen: torch.Tensor | None = None  # [rows, n_vq, V] codes already produced (repetition penalty)
    # A list: the draws ask the host nothing and note here where a short list may have cut a tie
    # (`sample_rows`); None: they ask.
    checks: list[torch.Tensor] | None = None

    def draw(self, codebook: int, logits: torch.Tensor) -> torch.Tensor:
        column = self.uniforms.narrow(1, 1 + codebook, 1)  # [rows, 1]; the stop head's is column 0
        if codebook == STOP_HEAD:
            return sample_rows(logits, self.stop, column, checks=self.checks)
        marks = None if self.seen is None else self.seen[:, codebook, : logits.shape[-1]]
        return sample_rows(logits, self.audio, column, marks, self.checks)


def frame_and_logits(
    model: MossTTSLocal, hidden: torch.Tensor, sampler: FrameSampler
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`decode_frame` with no callbacks (so it compiles into one graph), keeping its logits:
    hidden [B, H] -> (stop [B] bool, codes [B, n_vq], stop logits [B, 2], audio logits [n_vq, B, V])."""
    heads: list[torch.Tensor] = []

    def keep(codebook: int, logits: torch.Tensor) -> torch.Tensor:
        heads.append(logits)
        return sampler.draw(codebook, logits)

    stops, codes = decode_frame(model, hidden, keep)
    return stops, codes, heads[0], torch.stack(heads[1:])


def next_position(model: MossTTSLocal, codes: torch.Tensor) -> torch.Tensor:
    """The backbone's next input for rows that drew `codes` [rows, n_vq]: one position each,
    `[audio_assistant_slot, c_0..c_{n_vq-1}]` -> [rows, 1, 1 + n_vq]."""
    text = codes.new_full((codes.shape[0], 1), model.cfg.audio_assistant_slot_token_id)
    return torch.cat([text, codes], dim=1)[:, None]


@dataclass(frozen=True)
class StepInputs:
    """What a block's whole step reads: tensors on the device in fixed shapes, so a graph captured
    for one set replays for another (`compiled.StepGraphs` copies them into its own)."""

    hidden: torch.Tensor  # [size, H]: each row's last backbone hidden state (zeros for idle rows)
    slots: torch.Tensor  # long [size]: each row's pool slot (SCRATCH for idle rows)
    sampler: FrameSampler

    def tensors(self) -> list[torch.Tensor]:
        sampler = self.sampler
        params = [getattr(p, name) for p in (sampler.stop, sampler.audio) for name in RowParams.BASE]
        return [self.hidden, self.slots, sampler.uniforms, *params] + ([] if sampler.seen is None else [sampler.seen])

    def cloned(self) -> StepInputs:
        """Inputs of the same shapes in buffers of their own."""
        tensors = [t.clone() for t in self.tensors()]
        hidden, slots, uniforms = tensors[:3]
        base = len(RowParams.BASE)
        stop, audio = (RowParams(*tensors[3 + i * base : 3 + (i + 1) * base], facts=False) for i in (0, 1))
        seen = tensors[3 + 2 * base] if self.sampler.seen is not None else None
        return StepInputs(hidden, slots, FrameSampler(uniforms, stop, audio, seen))

    def load(self, other: StepInputs) -> None:
        """Copy `other`'s values into these buffers."""
        for mine, theirs in zip(self.tensors(), other.tensors()):
            mine.copy_(theirs)


def whole_step(
    model: MossTTSLocal, pool: KVPool, inputs: StepInputs, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block's decode step in one fixed shape, asking the host nothing: the frame (stop head and
    codebooks, drawn from the uniforms given), then every row's `next_position` through the
    backbone over its pool slot, reading `width` keys (`BlockedDecode.fixed`) -> (stop [size] bool,
    codes [size, n_vq], next hidden [size, H]). A row's tokens are those of the eager step: the
    same draws from the same logits."""
    sampler = inputs.sampler
    sampler = replace(sampler, stop=sampler.stop.without_facts(), audio=sampler.audio.without_facts(), checks=None)
    stops, codes = decode_frame(model, inputs.hidden, sampler.draw)
    attention = BlockedDecode.fixed(pool, inputs.slots, width)
    hidden = model.backbone(model.embed(next_position(model, codes)), attention.positions[:, None], attention)[:, -1]
    attention.advance()
    return stops, codes, hidden
