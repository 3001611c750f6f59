"""What `moss bench` measures and how: the model, batch sizes, frames, numerics modes, arms, repeats."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import MossError

# The dtype of the checkpoint a random preset stands in for, used when --dtype is auto: the v1.5
# checkpoint is bfloat16, and in float32 its weights alone would take 16.5 GB instead of 8.3 GB.
PRESET_DTYPES = {"v1.5": "bfloat16"}


@dataclass
class BenchOptions:
    model: Path | None = None
    codec: Path | None = None
    random_weights: str | None = None  # "tiny" | "35m" | "v1.5"
    batches: tuple[int, ...] = (1, 8)
    frames: int = 32
    modes: tuple[str, ...] = ("invariant", "blocks", "fast")  # blocks: the fixed-block fallback, forced
    arms: tuple[str, ...] = ("seeded",)  # bench/arms.py: how each request's random stream is seeded
    deploy: Path | None = None  # the deploy-seed arm's seed: its stage-0 seed
    allow_foreign_deploy: bool = False
    device: str = "auto"
    dtype: str = "auto"  # the preset's checkpoint dtype (PRESET_DTYPES), else float32 on CPU, bfloat16 elsewhere
    repeats: int = 3
    threads: int | None = None  # None: chosen from the model's size (moss_cli.threads)
    compile: bool = False  # torch.compile the engine's frame step (with graphs: the whole step)
    graphs: bool = False  # each decode block's whole step as one graph, captured on CUDA
    pack: bool = True  # lay CPU weights out for oneDNN (False: the plain kernel; never with compile)

    def __post_init__(self) -> None:
        if (self.model is None) != (self.codec is None):
            raise MossError("--model and --codec go together", field="--codec")
        if self.model is not None and self.random_weights is not None:
            raise MossError("use either --model/--codec or --random-weights", field="--random-weights")
        if self.dtype == "auto" and self.random_weights in PRESET_DTYPES:
            self.dtype = PRESET_DTYPES[self.random_weights]
