"""Batch compositions of the same requests. Each scenario is one or more runs; a run is an
ordered list of requests (the audited ones plus any neighbours), a max batch size and arrival
steps. Every run goes through the same `Synthesizer.run` that `moss synth` uses."""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass

from ..config.requests import Request
from ..synth import Prepared, Synthesizer

SCENARIOS = ("repeat", "batched", "shuffled", "batch-sizes", "seeded-neighbours", "length-mix", "staggered")
SHUFFLE_SEED = 1234
NEIGHBOUR_TEXTS = ["A neighbour with its own explicit seed.", "Another request sharing the batch.",
                   "Background traffic, seeded.", "One more neighbour in the queue."]


@dataclass
class Run:
    label: str
    prepared: list[Prepared]
    max_batch: int
    alone: bool = False  # every request in a run of its own (the reference)

    @property
    def keys(self) -> list[str]:
        return [p.request.id for p in self.prepared]


def _neighbours(synth: Synthesizer, count: int, prefix: str, *, seed_base: int, frames: list[int],
                greedy: bool) -> list[Prepared]:
    requests = [Request(id=f"{prefix}-{i}", text=NEIGHBOUR_TEXTS[i % len(NEIGHBOUR_TEXTS)], line=0,
                        seed=seed_base + i, max_new_frames=frames[i % len(frames)],
                        sampling={"temperature": 0.0} if greedy else {}) for i in range(count)]
    return synth.prepare(requests)


def _interleave(a: list[Prepared], b: list[Prepared]) -> list[Prepared]:
    out = []
    for i in range(max(len(a), len(b))):
        out += a[i:i + 1] + b[i:i + 1]
    return out


def build_runs(name: str, synth: Synthesizer, audited: list[Prepared], max_batch: int) -> list[Run]:
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
        neighbours = _neighbours(synth, n, "neighbour-seeded", seed_base=1000, frames=[16, 24, 8], greedy=False)
        return [Run("with-seeded-neighbours", _interleave(neighbours, audited), max_batch)]
    if name == "length-mix":
        longest = max((p.max_new_frames for p in audited), default=16)
        cap = synth.deploy.max_tokens or 4 * longest
        neighbours = _neighbours(synth, n, "neighbour-length", seed_base=2000,
                                 frames=[min(3 * longest, cap), 2], greedy=True)
        return [Run("with-long-and-short-neighbours", _interleave(neighbours, audited), max_batch)]
    if name == "staggered":
        late = [dataclasses.replace(p, arrival_step=3 * i)
                for i, p in enumerate(audited)]
        return [Run("arrivals-every-3-steps", late, max_batch)]
    raise ValueError(f"unknown scenario {name!r}")
