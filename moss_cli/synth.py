"""Compatibility: the names `moss_cli.synth` held before the pipeline/job split.

The pipeline (requests in, decoded audio out) is `moss_cli.pipeline`; the `moss synth` job
(output directory, journal, manifest, signals) is `moss_cli.job`."""

from .interrupts import Interrupted, interrupts_as_exceptions
from .job import SynthSummary, synthesize
from .pipeline import Prepared, Synthesizer, SynthOptions, SynthResult

__all__ = [
    "SynthOptions",
    "Synthesizer",
    "Prepared",
    "SynthResult",
    "SynthSummary",
    "synthesize",
    "Interrupted",
    "interrupts_as_exceptions",
]
