"""Streaming codec decode: the chunk schedule of the deploy's connector keys, and a per-request
decoder that turns frames into audio chunk by chunk as the talker produces them."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch

from ..model.codec import AudioCodec

DEFAULT_CHUNK = 15


def chunk_schedule(keys: dict) -> list[int]:
    """The leading chunk sizes (then `codec_chunk_frames` forever).

    `codec_chunk_ramp` (a list, or "4,4,8,15") gives the first chunks; otherwise
    `initial_codec_chunk_frames` (0: none) the first one. `codec_left_context_frames` needs no
    handling here: the decoder keeps its attention caches, so every chunk already sees its left
    context exactly."""
    steady = int(keys.get("codec_chunk_frames", DEFAULT_CHUNK) or DEFAULT_CHUNK)
    ramp = keys.get("codec_chunk_ramp")
    if isinstance(ramp, str):
        ramp = [int(x) for x in ramp.split(",") if x.strip()]
    if ramp and len(ramp) >= 2 and all(int(x) > 0 for x in ramp):
        return [int(x) for x in ramp] + [steady]
    initial = int(keys.get("initial_codec_chunk_frames", 0) or 0)
    return ([min(initial, steady)] if initial > 0 else []) + [steady]


def sizes(schedule: list[int]) -> Iterator[int]:
    yield from schedule[:-1]
    while True:
        yield schedule[-1]


@dataclass
class Chunk:
    frames: int
    decode_ms: float
    at_s: float  # the decoder's clock when the chunk's audio was ready (and handed to the sink)


@dataclass
class StreamingDecode:
    """One request's incremental decode. `sink` receives each chunk's audio [channels, samples]."""

    codec: AudioCodec
    schedule: list[int]
    sink: Callable[[torch.Tensor], None] | None = None
    clock: Callable[[], float] = time.perf_counter  # the engine's clock, so times compare with admission
    chunks: list[Chunk] = field(default_factory=list)
    audio: list[torch.Tensor] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._stream = self.codec.stream(1)
        self._pending: list[torch.Tensor] = []
        self._sizes = sizes(self.schedule)
        self._next = next(self._sizes)

    def push(self, frame: torch.Tensor) -> None:
        self._pending.append(frame)
        if len(self._pending) >= self._next:
            self._emit(self._next)
            self._next = next(self._sizes)

    def finish(self) -> torch.Tensor:
        """Decode what is left (a shorter last chunk) and return the whole waveform."""
        if self._pending:
            self._emit(len(self._pending))
        if not self.audio:
            return torch.zeros(self.codec.channels, 0)
        return torch.cat(self.audio, dim=-1)

    def _emit(self, count: int) -> None:
        frames, self._pending = self._pending[:count], self._pending[count:]
        start = self.clock()
        codes = torch.stack(frames).T.unsqueeze(1)  # [n_vq, 1, n]
        audio = self._stream.decode(codes.to(next(self.codec.parameters()).device))[0].cpu()
        decoded = self.clock()
        self.audio.append(audio)
        if self.sink is not None:
            self.sink(audio)
        # A chunk counts as delivered once the sink has it (the file holds it), not when decoded.
        self.chunks.append(Chunk(count, (decoded - start) * 1000.0, self.clock()))
