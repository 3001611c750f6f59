"""Audit reports: a Rich table for people, and the files (JSON, JUnit, Markdown, the audio of
diverging pairs) written for CI; output paths are checked before an audit starts."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..errors import MossError
from ..io.atomic import write_text_atomic
from .compare import format_audio, format_db
from .formats import junit_xml, markdown, to_json
from .golden import GoldenCheck
from .runner import AuditResult
from .summary import outcome, summary, worst_cases

__all__ = ["render", "write_reports", "check_output_paths", "summary", "outcome", "to_json", "junit_xml", "markdown"]


def render(console: Console, result: AuditResult, golden: GoldenCheck | None) -> None:
    s = summary(result, golden)
    table = Table(title=f"moss audit-determinism (level {s['level']})")
    for column in ("scenario", "runs", "pass", "fail", "unseeded", "verdict"):
        table.add_column(column, justify="left" if column in ("scenario", "runs", "verdict") else "right")
    runs: dict[str, set] = {}
    for case in result.cases:
        runs.setdefault(case.scenario, set()).add(case.run)
    for name, counts in s["scenarios"].items():
        causes = Counter(c.attribution.cause for c in result.cases if c.scenario == name and c.failed and c.attribution)
        verdict = (
            "[green]pass[/]"
            if not counts.get("fail")
            else "[red]fail[/] (" + ", ".join(f"{k} x{v}" for k, v in causes.items()) + ")"
        )
        table.add_row(
            name,
            ", ".join(sorted(runs[name])),
            str(counts.get("pass", 0)),
            str(counts.get("fail", 0)),
            str(counts.get("unseeded", 0)),
            verdict,
        )
    console.print(table)
    worst = worst_cases(result)[:10]
    if worst:
        # Short cells that never wrap (a long id is cut with an ellipsis, not broken mid-word); the
        # prose of each divergence goes below the table, where it wraps at spaces.
        offenders = Table(title="worst offenders (earliest divergence first)")
        for column in ("#", "request", "scenario/run", "cause", "frame:cb", "SNR dB"):
            offenders.add_column(
                column,
                no_wrap=True,
                overflow="ellipsis",
                justify="right" if column in ("#", "frame:cb", "SNR dB") else "left",
            )
        for n, case in enumerate(worst, start=1):
            cmp = case.comparison
            offenders.add_row(
                str(n),
                case.request,
                f"{case.scenario}/{case.run}",
                case.attribution.cause,
                f"{cmp.first_frame}:{cmp.first_codebook}" if cmp.first_frame is not None else _at(cmp.first_diff_s),
                format_db(cmp.snr_db),
            )
        console.print(offenders)
        for n, case in enumerate(worst, start=1):
            console.print(
                f"{n}. {escape(case.request)}: {escape(case.attribution.detail)} "
                f"({escape(format_audio(case.comparison))})",
                highlight=False,
            )
    for m in result.mixups:
        console.print(f"[yellow]warning:[/] {escape(m.message)}", highlight=False)  # wraps at spaces
    if golden is not None:
        console.print(
            f"golden {escape(str(golden.path))}: "
            + ("[green]no drift[/]" if golden.passed else f"[red]{escape(golden.describe())}[/]"),
            soft_wrap=True,
        )
        for k, (a, b) in golden.environment_changes.items():
            console.print(f"  environment {k}: {escape(str(a))} -> {escape(str(b))}")
    status = "[bold green]PASSED[/]" if s["passed"] else f"[bold red]{outcome(s)}[/]"
    warned = f", {s['warnings']} warning(s)" if s["warnings"] else ""
    compiled = f" ({s['compile_s']:.1f} s compiling)" if s["compile_s"] is not None else ""
    console.print(
        f"{status}: {s['failures']} violation(s), {s['unseeded']} unseeded difference(s), "
        f"{s['cases']} comparisons in {s['elapsed_s']:.1f} s{compiled}{warned}"
    )


def _at(seconds: float | None) -> str:
    """Where a server's audio first differs (no codes to point into)."""
    return "-" if seconds is None else f"@{seconds:.2f}s"


def write_reports(
    result: AuditResult,
    golden: GoldenCheck | None,
    *,
    json_path: Path | None = None,
    junit_path: Path | None = None,
    markdown_path: Path | None = None,
    report_dir: Path | None = None,
) -> list[Path]:
    """Write the requested reports; `report_dir` gets all of them plus the audio of diverging pairs."""
    from ..io.audio import to_pcm16, write_audio

    written = []
    if report_dir is not None:
        json_path = json_path or report_dir / "audit.json"
        junit_path = junit_path or report_dir / "junit.xml"
        markdown_path = markdown_path or report_dir / "summary.md"
    text_md = markdown(result, golden)
    for path, text in (
        (json_path, lambda: json.dumps(to_json(result, golden), indent=2) + "\n"),
        (junit_path, lambda: junit_xml(result, golden)),
        (markdown_path, lambda: text_md),
    ):
        if path is not None:
            write_text_atomic(path, text())
            written.append(path)
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text_md)
    if report_dir is not None:
        for case in result.cases:
            if case.verdict == "pass":
                continue
            folder = report_dir / "diverging" / case.scenario
            folder.mkdir(parents=True, exist_ok=True)
            pair = {
                "alone": result.reference[case.request],
                case.run: result.outputs[(case.scenario, case.run)][case.request],
            }
            for label, out in pair.items():
                path = folder / f"{case.request}.{label}.wav"
                write_audio(path, to_pcm16(out.audio), result.sample_rate, "wav")
                written.append(path)
    return written


REPORT_DIR_FILES = {"--json": "audit.json", "--junit": "junit.xml", "--markdown": "summary.md"}


def _nearest_existing(path: Path) -> Path:
    for parent in path.parents:
        if parent.exists():
            return parent
    return Path(".")


def check_output_paths(files: dict[str, Path | None], report_dir: Path | None = None) -> None:
    """Fail before any work when an output cannot be written, naming the option: a file output
    that is an existing directory, a report directory that is an existing file, or a parent that
    is a file or not writable. Missing parent directories are fine: the writers create them."""

    def check_parent(path: Path, option: str) -> None:
        existing = _nearest_existing(path)
        if not existing.is_dir():
            raise MossError(f"cannot create it: {existing} is a file, not a directory", file=path, field=option)
        if not os.access(existing, os.W_OK | os.X_OK):
            raise MossError(f"cannot create it: {existing} is not writable", file=path, field=option)

    if report_dir is not None:
        if report_dir.exists() and not report_dir.is_dir():
            raise MossError("exists and is not a directory", file=report_dir, field="--report-dir")
        if report_dir.is_dir():
            if not os.access(report_dir, os.W_OK | os.X_OK):
                raise MossError("directory is not writable", file=report_dir, field="--report-dir")
        else:
            check_parent(report_dir, "--report-dir")
        # What --report-dir writes by default, unless an explicit option says where.
        files = {
            **{option: report_dir / name for option, name in REPORT_DIR_FILES.items()},
            **{option: path for option, path in files.items() if path is not None},
        }
        diverging = report_dir / "diverging"
        if diverging.exists() and not diverging.is_dir():
            raise MossError(
                "exists and is not a directory (the audio of diverging pairs goes there)",
                file=diverging,
                field="--report-dir",
            )
    for option, path in files.items():
        if path is None:
            continue
        if path.is_dir():
            raise MossError("is a directory; expected a file path", file=path, field=option)
        check_parent(path, option)
