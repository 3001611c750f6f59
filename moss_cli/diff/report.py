"""`moss diff` on the terminal (a Rich table of what differs) and as files: `--json`, `--junit`,
`--markdown`, and `--report-dir` (all of them, the two clips of each differing id and the HTML page,
written whole or not at all)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import soundfile as sf
from rich.console import Console
from rich.markup import escape

from ..io.audio import write_audio
from ..measures.judgement import WORDS_UNCHECKED
from ..report.files import write_report_files
from ..report.terminal import print_table
from .compare import DiffResult
from .formats import junit_xml, markdown, metrics, ordered, outcome, summary, to_json
from .page import diff_view, pair_files, paired

REPORT_DIR_FILES = {"--json": "diff.json", "--junit": "junit.xml", "--markdown": "summary.md"}


def render(console: Console, result: DiffResult, limit: int = 20) -> None:
    s = summary(result)
    differing = [c for c in ordered(result.cases) if c.status != "identical"]
    if differing:
        rows = [[escape(c.id), escape(c.status), escape(c.cause), escape(metrics(c))] for c in differing[:limit]]
        print_table(console, ("id", "outcome", "cause", "audio"), rows, title=f"ids that differ (level {s['level']})")
        for case in differing[:limit]:
            console.print(f"{escape(case.id)}: {escape(case.detail)}", highlight=False)
        if len(differing) > limit:
            console.print(f"... and {len(differing) - limit} more (see --json or --report-dir)")
    for key, (a, b) in result.environment_changes.items():
        console.print(f"environment {escape(key)}: {escape(str(a))} -> {escape(str(b))}", highlight=False)
    if result.level == "speech" and result.asr_model is None:
        console.print(f"At --level speech {WORDS_UNCHECKED}.", highlight=False, markup=False)
    status = "[bold green]" if s["passed"] else "[bold red]"
    console.print(
        f"{status}{outcome(s)}[/]: {s['ids']} ids, {s['identical']} identical, {s['within_tolerance']} within "
        f"tolerance, {s['differ']} differ, {s['only_a']} only in A, {s['only_b']} only in B "
        f"({s['elapsed_s']:.1f} s)"
    )


def _copy_as_wav(source: Path, target: Path) -> None:
    """The clip as 16-bit WAV (every browser plays it), whatever the run wrote."""
    data, rate = sf.read(str(source), dtype="int16", always_2d=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_audio(target, np.ascontiguousarray(data), rate, "wav")


def write_reports(
    result: DiffResult,
    *,
    command: str | None = None,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    markdown_path: Path | None = None,
    report_dir: Path | None = None,
) -> list[Path]:
    doc = to_json(result, command)

    def pairs(folder: Path) -> None:
        for n, case in enumerate(paired(doc["cases"]), start=1):
            for side, (_, relative) in zip((result.a, result.b), pair_files(n)):
                _copy_as_wav(side.audio(case["id"]), folder / relative)

    return write_report_files(
        {
            "--json": lambda: json.dumps(doc, indent=2) + "\n",
            "--junit": lambda: junit_xml(result),
            "--markdown": lambda: markdown(result),
        },
        {"--json": json_path, "--junit": junit_path, "--markdown": markdown_path},
        report_dir,
        REPORT_DIR_FILES,
        pairs,
        lambda: diff_view(doc),
    )
