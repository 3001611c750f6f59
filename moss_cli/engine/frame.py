"""Decoding one frame per row with the local transformer: the stop decision, then the codebooks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..model.local import LocalPast
from ..model.talker import STOP, MossTTSLocal
from .sampling import RowParams, sample_rows

# (codebook, logits [B, V]) -> codes [B]; codebook -1 is the stop head (logits [B, 2]).
Chooser = Callable[[int, torch.Tensor], torch.Tensor]
STOP_HEAD = -1


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


@dataclass(frozen=True)
class FrameDraws:
    """What a block's rows draw one frame from: each row's uniforms for every head, drawn from its
    own stream before the frame, and per-row sampling parameters; a row's tokens then depend only
    on its logits and these."""

    uniforms: torch.Tensor  # [rows, 1 + n_vq]: the stop head, then codebooks 0..n_vq-1
    stop: RowParams
    audio: RowParams
    seen: torch.Tensor | None = None  # [rows, n_vq, V] codes already produced (repetition penalty)

    def draw(self, codebook: int, logits: torch.Tensor) -> torch.Tensor:
        column = self.uniforms.narrow(1, 1 + codebook, 1)  # [rows, 1]; the stop head's is column 0
        if codebook == STOP_HEAD:
            return sample_rows(logits, self.stop, column)
        marks = None if self.seen is None else self.seen[:, codebook, : logits.shape[-1]]
        return sample_rows(logits, self.audio, column, marks)


def sample_frame(
    model: MossTTSLocal, hidden: torch.Tensor, draws: FrameDraws
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """A whole frame for a block with no callbacks (so it can be compiled into one graph):
    hidden [B, H] -> (stop [B] bool, codes [B, n_vq], stop logits [B, 2], audio logits [n_vq, B, V]).
    Every row gets codes, also rows whose stop head fired (the caller ignores them)."""
    heads: list[torch.Tensor] = []

    def keep(codebook: int, logits: torch.Tensor) -> torch.Tensor:
        heads.append(logits)
        return draws.draw(codebook, logits)

    local_hidden, past = start_frame(model, hidden)
    stops = choose_stop(model, local_hidden, keep)
    codes = choose_codes(model, local_hidden, past, keep)
    return stops, codes, heads[0], torch.stack(heads[1:])
