"""What goes into the engine and what comes out: requests, results, frame events, the logits hook.
The engine knows nothing of files or of what a key means."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from ..sampling_params import HeadSampling

# Called right before each draw with (request key, frame index, codebook, logits [V], rows in the
# batch, the row's generator or None for the global RNG); codebook -1 is the stop head. It may
# return replacement logits (a test hook for perturbations) or None. The audit records logits and
# random-stream states through it.
LogitsHook = Callable[[str, int, int, torch.Tensor, int, "torch.Generator | None"], "torch.Tensor | None"]


@dataclass
class GenerationRequest:
    """What the engine needs to know about one request; it knows nothing of files or ids' meaning."""

    key: str
    prompt: torch.Tensor  # [T, 1 + n_vq]
    max_new_frames: int
    audio: HeadSampling
    stop: HeadSampling
    rng: int | torch.Generator | None = None  # its random stream: a seed, a generator, or None (see `random_stream`)
    do_sample: bool = True
    arrival_step: int = 0  # the engine step from which it may be admitted (to model late arrivals)
    ignore_stop: bool = False  # run the stop head but never stop before max_new_frames (benchmarks)


@dataclass
class GenerationResult:
    key: str
    codes: torch.Tensor  # [frames, n_vq] on CPU
    stopped: bool  # True: the stop head ended it; False: the frame budget did
    batch_size_seen: int  # most requests in flight together while this one ran
    first_step: int
    last_step: int
    wall_s: float
    admitted_at: float = 0.0  # the engine clock's reading when the request was admitted
    cancelled: bool = False  # dropped on the caller's word (`cancelled`), with the frames made until then


@dataclass
class FrameEvent:
    """One frame a request produced (yielded while it runs, when the caller asks for frames)."""

    key: str
    codes: torch.Tensor  # [n_vq], on the engine's device


Event = GenerationResult | FrameEvent
