"""What `moss bench` measures and how: the model, batch sizes, frames, numerics modes, repeats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class BenchOptions:
    model: Path | None = None
    codec: Path | None = None
    random_weights: str | None = None  # "tiny" | "35m" | "v1.5"
    batches: tuple[int, ...] = (1, 8)
    frames: int = 32
    modes: tuple[str, ...] = ("invariant", "blocks", "fast")  # blocks: the fixed-block fallback, forced
    device: str = "auto"
    dtype: str = "auto"  # float32 on CPU, bfloat16 on accelerators
    repeats: int = 3
    threads: int | None = None  # None: chosen from the model's size (moss_cli.threads)
    compile: bool = False  # torch.compile the engine's frame step
