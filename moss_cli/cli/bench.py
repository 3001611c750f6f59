"""`moss bench`: engine and codec speed per numerics mode and batch size, with the hardware floor."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..errors import MossError
from .common import Device, DType, stderr, stdout, user_errors
from .options import CodecOption, CompileOption, DeviceOption, ModelOption, ThreadsOption

COLUMNS = (  # the terminal's short headers; the JSON has every figure with its full name
    ("mode", "mode"),
    ("batch", "batch"),
    ("layout", "layout"),
    ("frames/s", "talker_frames_per_s"),
    ("eff.", "efficiency"),
    ("tok/s", "prefill_tokens_per_s"),
    ("RTF", "codec_rtf"),
    ("TTFA s", "ttfa_s"),
    ("MB", "peak_memory_mb"),
)
LEGEND = (
    "frames/s: talker decode; eff.: hardware floor / engine step; tok/s: prefill; RTF: codec seconds per "
    "audio second; TTFA: time to first audio, streaming; MB: peak memory (medians; the JSON has the spread)"
)


def _numbers(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        values = ()
    if not values or min(values) < 1:
        raise MossError(f"expected comma-separated positive integers, got {text!r}", field=option)
    return values


def bench(
    model: ModelOption = None,
    codec: CodecOption = None,
    random_weights: Annotated[
        Optional[str],
        typer.Option(help="Random weights at a preset's shapes instead of a checkpoint: tiny, 35m or v1.5."),
    ] = None,
    batch: Annotated[str, typer.Option(help="Batch sizes, comma-separated.")] = "1,8",
    frames: Annotated[int, typer.Option(min=2, help="Frames per request.")] = 32,
    modes: Annotated[
        str,
        typer.Option(
            help="Numerics modes: invariant (the layout this machine allows), blocks (fixed blocks of the batch's "
            "rows, forced: the fallback's cost here), blocks:R (fixed blocks of R rows), fast."
        ),
    ] = "invariant,blocks,fast",
    repeats: Annotated[int, typer.Option(min=1, help="Runs per figure (the median is reported).")] = 3,
    device: DeviceOption = Device.auto,
    dtype: Annotated[
        DType,
        typer.Option(
            help="Model dtype (auto: bfloat16 for --random-weights v1.5, as its checkpoint; else float32 on CPU, "
            "bfloat16 elsewhere)."
        ),
    ] = DType.auto,
    threads: ThreadsOption = None,
    compile: CompileOption = False,
    no_pack: Annotated[
        bool, typer.Option("--no-pack", help="Keep CPU weights plain (the plain kernel) instead of packed for oneDNN.")
    ] = False,
    json_path: Annotated[Optional[Path], typer.Option("--json", help="Write the figures as JSON.")] = None,
) -> None:
    """Talker frames/s, prefill tokens/s, codec real-time factor, time to first audio, peak memory and
    efficiency against the hardware floor, per mode and batch; the invariant/fast ratio per batch."""
    with user_errors():
        from ..bench import BenchOptions, run_bench

        if (model is None) != (codec is None):
            raise MossError("--model and --codec go together", field="--codec")
        if model is not None and random_weights is not None:
            raise MossError("use either --model/--codec or --random-weights", field="--random-weights")
        options = BenchOptions(
            model=model,
            codec=codec,
            random_weights=random_weights,
            batches=_numbers(batch, "--batch"),
            frames=frames,
            modes=tuple(m.strip() for m in modes.split(",") if m.strip()),
            device=device.value,
            dtype=dtype.value,
            repeats=repeats,
            threads=threads,
            compile=compile,
            pack=not no_pack,
        )
        report = run_bench(
            options,
            progress=lambda row: stderr.print(
                f"{row.mode} x{row.batch}: {row.talker_frames_per_s} frames/s", highlight=False
            ),
        )
        if json_path is not None:
            from ..io.atomic import write_text_atomic

            write_text_atomic(json_path, json.dumps(report.as_dict(), indent=2) + "\n")
    setup = report.setup
    table = Table(
        title=f"moss bench: {setup['model']}, {setup['device']} {setup['dtype']}, "
        f"{setup['threads']} thread{'s' if setup['threads'] != 1 else ''}, {setup['frames']} frames, "
        f"{setup['linear_kernel']} linear kernel"
    )
    for title, _ in COLUMNS:
        table.add_column(title, justify="left" if title == "mode" else "right", no_wrap=True)
    for row in report.rows:
        table.add_row(*(str(getattr(row, key)) for _, key in COLUMNS))
    stdout.print(table)
    stdout.print(LEGEND, style="dim", highlight=False)
    for mode, ratios in report.ratios.items():
        for size, ratio in ratios.items():
            low, high = report.ratio_ranges[mode][size]
            stdout.print(
                f"batch {size}: {mode} / fast step time {ratio} [{low}-{high}] (the modes alternate)",
                highlight=False,
                markup=False,
            )
    bounds = {}  # the bound hardly depends on the mode: one line per batch, its first mode's
    for row in report.rows:
        bounds.setdefault(row.batch, row)
    for batch, row in bounds.items():
        stdout.print(
            f"batch {batch}: reading the KV cache once takes {row.kv_read_ms} ms per step, so no engine could reach "
            f"an efficiency above {row.efficiency_bound} here",
            highlight=False,
            markup=False,
        )
    for row in report.rows:
        if row.compile_s:
            stdout.print(f"{row.mode} x{row.batch}: compiled the frame step in {row.compile_s} s", highlight=False)
