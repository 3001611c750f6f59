"""`moss bench`: engine and codec speed per numerics mode and batch size, against the hardware floor.

models.py: what is measured (a checkpoint, the tiny model, random weights at preset shapes);
run.py: the measurements (talker decode and prefill, codec, streaming first audio, the floor)."""

from .run import BenchOptions, BenchReport, BenchRow, run_bench

__all__ = ["BenchOptions", "BenchReport", "BenchRow", "run_bench"]
