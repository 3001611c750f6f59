"""Batch compositions of the same requests. Each scenario is one or more runs; a run is an
ordered list of requests (the audited ones plus any neighbours), a max batch size and arrival
steps. Every run goes through the same `Synthesizer.run` that `moss synth` uses."""

from __future__ import annotations

import dataclasses
import random
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..config.requests import Request

if TYPE_CHECKING:  # the CLI reads SCENARIOS for its help text without importing torch
    from ..pipeline import Prepared, Synthesizer

SCENARIOS = (
    "repeat",
    "batched",
    "shuffled",
    "batch-sizes",
    "seeded-neighbours",
    "length-mix",
    "staggered",
    "voices",
    "streaming",
    "sharded",
)
SHUFFLE_SEED = 1234
NEIGHBOUR_TEXTS = [
    "A neighbour with its own explicit seed.",
    "Another request sharing the batch.",
    "Background traffic, seeded.",
    "One more neighbour in the queue.",
]


@dataclass
class Run:
    label: str
    prepared: list[Prepared]
    max_batch: int
    alone: bool = False  # every request in a run of its own (the reference)
    stream: bool = False  # decode chunk by chunk while generating (compared with offline decode)
    shards: list[list[Prepared]] | None = None  # split into engine runs of their own (with --ray, on workers)

    @property
    def keys(self) -> list[str]:
        return [p.request.id for p in self.prepared]

    def pieces(self) -> list[tuple[list[Prepared], int]]:
        """The engine runs this run is made of, each (requests, max batch): one per request when
        alone, one per shard when sharded, else one."""
        if self.alone:
            return [([p], 1) for p in self.prepared]
        if self.shards is not None:
            return [(shard, self.max_batch) for shard in self.shards]
        return [(self.prepared, self.max_batch)]

    def piece_of(self, key: str) -> tuple[list[Prepared], int]:
        """The engine run (requests, max batch) that holds request `key`."""
        return next(piece for piece in self.pieces() if key in {p.request.id for p in piece[0]})


def neighbour_requests(count: int, prefix: str, *, seed_base: int, frames: list[int], greedy: bool) -> list[Request]:
    """Extra requests with explicit seeds that share a composition with the audited ones."""
    return [
        Request(
            id=f"{prefix}-{i}",
            text=NEIGHBOUR_TEXTS[i % len(NEIGHBOUR_TEXTS)],
            line=0,
            seed=seed_base + i,
            max_new_frames=frames[i % len(frames)],
            sampling={"audio_temperature": 0.0} if greedy else {},
        )
        for i in range(count)
    ]


def interleave(a: list, b: list) -> list:
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i : i + 1] + b[i : i + 1]
    return out


def voice_neighbour_requests(count: int, workdir: Path) -> list[Request]:
    """Neighbours cloning two different synthetic voices (one in continuation mode) and one without."""
    import soundfile as sf

    from ..io.reference_audio import synthetic_voice

    clips = []
    for i, pitch in enumerate((110.0, 220.0)):
        path = workdir / f"voice-{i}.wav"
        if not path.exists():
            sf.write(str(path), synthetic_voice(1.6, 22_050, pitch), 22_050, subtype="PCM_16")
        clips.append(path)
    requests = []
    for i in range(count):
        kind = i % 3
        requests.append(
            Request(
                id=f"neighbour-voice-{i}",
                text=NEIGHBOUR_TEXTS[i % len(NEIGHBOUR_TEXTS)],
                line=0,
                seed=3000 + i,
                max_new_frames=[20, 12, 16][kind],
                ref_audio=clips[kind % 2] if kind < 2 else None,
                ref_text="A neighbour's transcript" if kind == 1 else None,
            )
        )
    return requests


def build_runs(
    name: str, synth: Synthesizer, audited: list[Prepared], max_batch: int, workdir: Path | None = None
) -> list[Run]:
    n = len(audited)
    if name == "repeat":
        return [Run("repeat", audited, 1, alone=True)]
    if name == "batched":
        return [Run(f"max-batch-{max_batch}", audited, max_batch)]
    if name == "shuffled":
        order = list(audited)
        random.Random(SHUFFLE_SEED).shuffle(order)
        return [Run(f"shuffled-seed-{SHUFFLE_SEED}", order, max_batch)]
    if name == "batch-sizes":
        return [Run(f"max-batch-{size}", audited, size) for size in sorted({2, 3, max_batch}) if 1 < size <= max_batch]
    if name == "seeded-neighbours":
        neighbours = neighbour_requests(n, "neighbour-seeded", seed_base=1000, frames=[16, 24, 8], greedy=False)
        return [Run("with-seeded-neighbours", interleave(synth.prepare(neighbours), audited), max_batch)]
    if name == "length-mix":
        longest = max((p.max_new_frames for p in audited), default=16)
        cap = synth.deploy.max_tokens or 4 * longest
        neighbours = neighbour_requests(
            n, "neighbour-length", seed_base=2000, frames=[min(3 * longest, cap), 2], greedy=True
        )
        return [Run("with-long-and-short-neighbours", interleave(synth.prepare(neighbours), audited), max_batch)]
    if name == "staggered":
        late = [dataclasses.replace(p, arrival_step=3 * i) for i, p in enumerate(audited)]
        return [Run("arrivals-every-3-steps", late, max_batch)]
    if name == "voices":
        voices = voice_neighbour_requests(n, workdir or Path(tempfile.mkdtemp(prefix="moss-voices-")))
        return [Run("with-voice-cloning-neighbours", interleave(synth.prepare(voices), audited), max_batch)]
    if name == "streaming":
        schedule = " ".join(str(c) for c in synth.chunk_schedule)
        return [Run(f"streamed-chunks-{schedule.replace(' ', '-')}-then-repeat", audited, max_batch, stream=True)]
    if name == "sharded":  # as if split across workers: each shard is an engine run of its own
        size = -(-n // 3)
        backwards = audited[::-1]
        return [
            Run("2-shards-alternating", audited, max_batch, shards=[s for s in (audited[0::2], audited[1::2]) if s]),
            Run(
                "3-shards-contiguous-reversed",
                audited,
                max_batch,
                shards=[backwards[i : i + size] for i in range(0, n, size)],
            ),
        ]
    raise ValueError(f"unknown scenario {name!r}")
