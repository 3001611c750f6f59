"""`moss bench`: engine and codec speed per numerics mode and batch size, against the hardware floor.

options.py: what is asked for (model, batch sizes, modes, repeats);
models.py: what is measured (a checkpoint, the tiny model, random weights at preset shapes);
run.py: the measurements (talker decode and prefill, codec, streaming first audio, the floor);
local_report.py: their JSON and what the terminal shows. `--server`: server.py, report.py."""

from .options import BenchOptions
from .run import BenchReport, BenchRow, run_bench

__all__ = ["BenchOptions", "BenchReport", "BenchRow", "run_bench"]
