"""The local bench's report (run.py's `BenchReport`): its JSON file, and what the terminal shows: a
line per figure measured as the bench goes, then the table, its legend and the lines that read it
(each mode's and arm's cost, the bound the KV cache sets on efficiency, the bytes a step reads, compile
times)."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..io.atomic import write_text_atomic
from ..report.terminal import print_table
from .run import BenchReport, BenchRow

COLUMNS = (  # the terminal's short headers; the JSON has every figure with its full name
    ("mode", "mode"),
    ("arm", "arm"),
    ("batch", "batch"),
    ("layout", "layout"),
    ("frames/s", "talker_frames_per_s"),
    ("eff.", "efficiency"),
    ("eff. bw", "efficiency_bandwidth"),
    ("tok/s", "prefill_tokens_per_s"),
    ("RTF", "codec_rtf"),
    ("TTFA s", "ttfa_s"),
    ("MB", "peak_memory_mb"),
)
LEGEND = (
    "frames/s: talker decode; eff.: timed-products floor / engine step (launch-bound on an accelerator); "
    "eff. bw: physical bound (bytes a step reads / copy bandwidth) / engine step; tok/s: prefill; "
    "RTF: codec seconds per audio second; TTFA: time to first audio, streaming; MB: peak memory "
    "(medians; the JSON has the spread)"
)


def measured(row: BenchRow) -> str:
    """A figure as the bench measures it: one line each, plain text."""
    return f"{row.mode} {row.arm} x{row.batch}: {row.talker_frames_per_s} frames/s"


def write_json(report: BenchReport, path: Path | None) -> None:
    if path is not None:
        write_text_atomic(path, json.dumps(report.as_dict(), indent=2) + "\n")


def render(console: Console, report: BenchReport) -> None:
    setup = report.setup
    title = (
        f"moss bench: {escape(setup['model'])}, {setup['device']} {setup['dtype']}, "
        f"{setup['threads']} thread{'s' if setup['threads'] != 1 else ''}, {setup['frames']} frames, "
        f"{setup['linear_kernel']} linear kernel, copy bandwidth {setup['bandwidth_gb_per_s']} GB/s"
    )
    headers = [header for header, _ in COLUMNS]
    rows = [[escape(str(getattr(row, key))) for _, key in COLUMNS] for row in report.rows]
    print_table(console, headers, rows, title=title, right=set(headers) - {"mode", "arm"})
    console.print(LEGEND, style="dim", highlight=False)
    say = partial(console.print, highlight=False, markup=False)
    for mode, ratios in report.ratios.items():
        for size, ratio in ratios.items():
            low, high = report.ratio_ranges[mode][size]
            say(f"batch {size}: {mode} / fast step time {ratio} [{low}-{high}] (the modes alternate)")
    for arm, by_mode in report.arm_ratios.items():
        for mode, ratios in by_mode.items():
            for size, ratio in ratios.items():
                low, high = report.arm_ratio_ranges[arm][mode][size]
                say(f"batch {size}: {mode} {arm} / unseeded step time {ratio} [{low}-{high}] (the arms alternate)")
    bounds = {}  # the bound hardly depends on the mode: one line per batch, its first mode's
    for row in report.rows:
        bounds.setdefault(row.batch, row)
    for batch, row in bounds.items():
        say(
            f"batch {batch}: reading the KV cache once takes {row.kv_read_ms} ms per step, so no engine could reach "
            f"an efficiency above {row.efficiency_bound} here"
        )
        say(
            f"batch {batch}: a step must read {row.step_read_mb} MB (the KV cache {row.kv_read_mb} MB of it), "
            f"{row.bandwidth_step_ms} ms at {setup['bandwidth_gb_per_s']} GB/s: the physical bound"
        )
    built = "compiled or captured the whole step" if setup["graphs"] else "compiled the frame step"
    for row in report.rows:
        if row.compile_s:
            console.print(f"{row.mode} x{row.batch}: {built} in {row.compile_s} s", highlight=False)
