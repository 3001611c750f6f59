"""What `moss synth` shows when it ends: its summary (job.py's `SynthSummary`) as a table and the
lines below it (where the outputs are, what produced no audio, files it kept that this run did not
make), on the console it is given."""

from __future__ import annotations

from functools import partial
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..report.terminal import print_table
from .job import SynthSummary


def render(console: Console, summary: SynthSummary, requests: Path) -> None:
    if summary.dry_run:
        title = "moss synth --dry-run: the requests are valid"
        columns = ("requests", "would skip", "frame budget", "max audio s", "seed sources")
        values = (
            str(summary.requests),
            str(summary.resumed),
            str(summary.frame_budget),
            f"{summary.frame_budget / summary.frame_rate:.1f}",
            ", ".join(f"{source} {count}" for source, count in sorted(summary.seed_sources.items())),
        )
    else:
        title = "moss synth"
        reasons = summary.stop_reasons
        columns = ("requests", "resumed", "stop/max/empty", "audio s", "wall s", "RTF")
        values = (
            str(summary.requests),
            str(summary.resumed),
            f"{reasons['stop']}/{reasons['max_frames']}/{reasons['empty']}",
            f"{summary.audio_s:.2f}",
            f"{summary.wall_s:.2f}",
            f"{summary.real_time_factor:.3f}",
        )
    print_table(console, columns, [[escape(v) for v in values]], title=title, right=columns)  # paths go below
    say = partial(console.print, soft_wrap=True, highlight=False)  # a path is left whole for the terminal
    say(f"requests: {requests}" if summary.dry_run else f"out: {summary.out}")
    if summary.server:
        say(f"server: {summary.server}")
    if summary.manifest:
        say(f"manifest: {summary.manifest}")
    if summary.compile_s is not None:
        say(f"compile: {summary.compile_s:.1f} s of the wall time compiled or captured the decode step")
    if summary.empty:
        console.print(f"[yellow]empty:[/] {empty(summary)}")
    if summary.others:
        say(
            f"the manifest also keeps the rows of {len(summary.others)} request(s) of another request file "
            f"written here before: {_some(summary.others)}"
        )
    if summary.orphans:
        console.print(
            f"[yellow]not in the manifest:[/] {len(summary.orphans)} audio file(s) that no run recorded here "
            f"(kept): {_some(summary.orphans)}",
            highlight=False,
        )
    if summary.other_formats:
        console.print(
            f"[yellow]other format:[/] {len(summary.other_formats)} audio file(s) of these requests in another "
            f"format than this run's (kept): {_some(summary.other_formats)}",
            highlight=False,
        )


def empty(summary: SynthSummary) -> str:
    """The requests that produced no audio, in words (the first few named)."""
    return f"{len(summary.empty)} request(s) produced no audio: {_some(summary.empty)}"


def _some(names: list[str], shown: int = 10) -> str:
    return ", ".join(names[:shown]) + (f" and {len(names) - shown} more" if len(names) > shown else "")
