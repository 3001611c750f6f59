"""What a synthesis run is asked to do (plain values; nothing is loaded here)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..numerics import INVARIANT, Numerics


@dataclass
class SynthOptions:
    deploy: Path | None = None  # None: the tiny recipe, or vllm-omni's v1.5 defaults with `model`
    model: Path | None = None  # talker checkpoint (None: the shipped tiny one)
    codec: Path | None = None  # audio tokenizer checkpoint (with `model`)
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int | None = None  # None: stage-0 max_num_seqs
    legacy_global_rng: bool = False  # negative control: every draw from one global stream
    numerics: Numerics = INVARIANT  # batch-invariant or fast, for the engine and the codec alike
    threads: int | None = None  # torch CPU threads; None: chosen from the model's size (moss_cli.threads)
    allow_foreign_deploy: bool = False  # a deploy file written for another model: warn, not fail
    compile: bool = False  # torch.compile the engine's frame step (engine/compiled.py)
    graphs: bool = False  # each decode block's whole step as one graph, captured on CUDA (engine/compiled.py)

    @property
    def batch_invariant(self) -> bool:
        return self.numerics.batch_invariant
