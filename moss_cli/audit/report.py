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
from ..io.atomic import atomic_dir, check_creatable, write_text_atomic
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
                f"{cmp.first_frame}:{cmp.first_codebook}"
                if cmp.first_frame is not None
                else _at(cmp.first_diverging_s),
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
        for said in golden.membership:  # not drift: nothing to compare them with
            console.print(f"  [yellow]{escape(said)}[/]", soft_wrap=True)
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
    """Write the requested reports; `report_dir` gets all of them, the audio of each diverging pair
    and the HTML page (`index.html`)."""
    from ..io.audio import to_pcm16, write_audio
    from .html_report import audit_view, pair_files

    doc = to_json(result, golden)
    text_md = markdown(result, golden)

    def pairs(folder: Path) -> None:
        for case in result.cases:
            if case.verdict == "pass":
                continue
            pair = [result.reference[case.request], result.outputs[(case.scenario, case.run)][case.request]]
            for (_, relative), out in zip(pair_files(case.scenario, case.run, case.request), pair):
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                write_audio(folder / relative, to_pcm16(out.audio), result.sample_rate, "wav")

    written = write_report_files(
        {
            "--json": lambda: json.dumps(doc, indent=2) + "\n",
            "--junit": lambda: junit_xml(result, golden),
            "--markdown": lambda: text_md,
        },
        {"--json": json_path, "--junit": junit_path, "--markdown": markdown_path},
        report_dir,
        REPORT_DIR_FILES,
        pairs,
        lambda: audit_view(doc),
    )
    step_summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if step_summary:
        with open(step_summary, "a", encoding="utf-8") as handle:
            handle.write(text_md)
    return written


def write_report_files(texts: dict, explicit: dict, report_dir: Path | None, defaults: dict, pairs, view) -> list[Path]:
    """The report files (`texts`: option -> a function giving the text) at their `explicit` paths and,
    for `report_dir`, a folder written whole or not at all: every one of the `defaults` files (an
    explicit path is a copy elsewhere), whatever `pairs(folder)` writes (the audio of diverging pairs),
    the HTML page of `view()` with its plots, and the marker that lets a later report replace the folder."""
    from .html import write_page

    written = []
    if report_dir is not None:
        with atomic_dir(report_dir) as folder:
            for option, name in defaults.items():
                write_text_atomic(folder / name, texts[option]())
            pairs(folder)
            write_page(folder, view())
            write_text_atomic(folder / MARKER, "moss\n")
            written = [report_dir / p.relative_to(folder) for p in sorted(folder.rglob("*")) if p.is_file()]
    for option, path in explicit.items():  # after the folder: one of them may lie inside it
        if path is not None:
            write_text_atomic(path, texts[option]())
            written.append(path)
    return written


REPORT_DIR_FILES = {"--json": "audit.json", "--junit": "junit.xml", "--markdown": "summary.md"}
MARKER = ".moss-report"  # a folder holding it was written by moss: a later report may replace it whole
# What reports written before the marker existed hold (files, then folders).
REPORT_ENTRIES = ({"audit.json", "junit.xml", "summary.md", "index.html", "diff.json"}, {"diverging", "plots"})


def replaceable(folder: Path) -> list[str]:
    """Entries of an existing report folder that are not moss's (empty: the folder may be replaced)."""
    if (folder / MARKER).is_file():
        return []
    files, folders = REPORT_ENTRIES
    return sorted(
        p.name for p in folder.iterdir() if not (p.name in files and p.is_file() or p.name in folders and p.is_dir())
    )


def check_output_paths(
    files: dict[str, Path | None], report_dir: Path | None = None, defaults: dict[str, str] = REPORT_DIR_FILES
) -> None:
    """Fail before any work when an output cannot be written, naming the option: a file output
    that is an existing directory, a report directory that is an existing file, holds things moss did
    not write (it is replaced whole), or a parent that is a file or not writable. Missing parent
    directories are fine: the writers create them. `defaults`: the files a report folder holds (as
    well as any explicit path)."""
    if report_dir is not None:
        if report_dir.exists() and not report_dir.is_dir():
            raise MossError("exists and is not a directory", file=report_dir, field="--report-dir")
        if report_dir.is_dir() and not os.access(report_dir, os.W_OK | os.X_OK):
            raise MossError("directory is not writable", file=report_dir, field="--report-dir")
        check_creatable(report_dir.resolve(), "--report-dir")  # the report is built beside it
    outputs = [(option, path) for option, path in files.items() if path is not None]
    if report_dir is not None:
        outputs += [("--report-dir", report_dir / name) for name in defaults.values()]
    for option, path in outputs:
        if path.is_dir():
            raise MossError("is a directory; expected a file path", file=path, field=option)
        check_creatable(path, option)
    if report_dir is not None and report_dir.is_dir():
        foreign = replaceable(report_dir)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise MossError(
                f"holds files moss did not write ({shown}); a report replaces its folder whole: "
                "give a new or empty directory",
                file=report_dir,
                field="--report-dir",
            )
