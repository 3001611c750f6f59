"""Decoding one frame per row with the local transformer: the stop decision, then the codebooks."""

from __future__ import annotations

from typing import Callable

import torch

from ..model.local import LocalPast
from ..model.talker import STOP, MossTTSLocal

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
