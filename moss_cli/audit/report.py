"""Audit reports: a Rich table for people, and the files (JSON, JUnit, Markdown, the audio of
diverging pairs, the HTML page) written for CI through report/files.py."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from ..measures.waveform import format_db
from ..report.files import write_report_files
from ..report.terminal import print_table, print_warning
from .compare import format_audio
from .formats import junit_xml, markdown, to_json
from .golden import GoldenCheck
from .runner import AuditResult
from .summary import outcome, question_lines, summary, words_line, worst_cases
from .verdicts import SAME_SPEECH, UNSEEDED_NOT_REPRODUCIBLE

__all__ = ["render", "conclude", "write_reports", "summary", "outcome", "to_json", "junit_xml", "markdown"]


def render(console: Console, result: AuditResult, golden: GoldenCheck | None) -> None:
    s = summary(result, golden)
    for line, (key, answer) in zip(question_lines(result), result.questions.items()):
        style = {True: "green", False: "red"}.get(answer["passed"], "yellow")
        if answer["passed"] and answer["verdict"] not in ("pass", "batch-invariant"):
            style = "yellow"  # a warning
        name, said = line.split(": ", 1)
        console.print(f"[bold]{name}:[/] [{style}]{escape(said)}[/]", highlight=False)
    if words_line(result):
        console.print(escape(words_line(result)), highlight=False)
    runs: dict[str, set] = {}
    for case in result.cases:
        runs.setdefault(case.scenario, set()).add(case.run)
    rows = []
    counts_shown = ("pass", "fail", "unseeded") + ((SAME_SPEECH,) if s["same_speech"] else ())
    for name, counts in s["scenarios"].items():
        causes = Counter(c.attribution.cause for c in result.cases if c.scenario == name and c.failed and c.attribution)
        verdict = (
            "[green]pass[/]"
            if not counts.get("fail")
            else "[red]fail[/] (" + ", ".join(f"{k} x{v}" for k, v in causes.items()) + ")"
        )
        counted = [str(counts.get(key, 0)) for key in counts_shown]
        rows.append([escape(name), escape(", ".join(sorted(runs[name]))), *counted, verdict])
    headers = ("scenario", "runs", *(c.replace("-", " ") for c in counts_shown), "verdict")
    title = f"moss audit-determinism (level {s['level']})"
    print_table(console, headers, rows, title=title, right=headers[2 : 2 + len(counts_shown)])
    worst = worst_cases(result)[:10]
    if worst:
        # Short cells; the prose of each divergence goes below the table, where it wraps at spaces.
        rows = []
        for n, case in enumerate(worst, start=1):
            cmp = case.comparison
            where = _at(cmp.first_diverging_s) if cmp.first_frame is None else f"{cmp.first_frame}:{cmp.first_codebook}"
            cells = [case.request, f"{case.scenario}/{case.run}", case.attribution.cause, where, format_db(cmp.snr_db)]
            rows.append([str(n), *map(escape, cells)])
        headers = ("#", "request", "scenario/run", "cause", "frame:cb", "SNR dB")
        title = "worst offenders (earliest divergence first)"
        print_table(console, headers, rows, title=title, right=("#", "frame:cb", "SNR dB"))
        for n, case in enumerate(worst, start=1):
            console.print(
                f"{n}. {escape(case.request)}: {escape(case.attribution.detail)} "
                f"({escape(format_audio(case.comparison))})",
                highlight=False,
            )
    if not result.server:  # a server audit shows its verdicts with its own section
        by_verdict = Counter(v["verdict"] for v in result.verdicts.values())
        said = ", ".join(f"{count} {verdict}" for verdict, count in sorted(by_verdict.items()))
        console.print(f"requests: {escape(said)}", highlight=False)
    for m in result.mixups:
        print_warning(console, m.message)
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
    if result.stopped is not None:
        console.print(f"[bold red]{escape(result.stopped.sentence)}[/]", highlight=False)
    status = "[bold green]PASSED[/]" if s["passed"] else f"[bold red]{outcome(s)}[/]"
    warned = f", {s['warnings']} warning(s)" if s["warnings"] else ""
    compiled = f" ({s['compile_s']:.1f} s compiling)" if s["compile_s"] is not None else ""
    same = f", {s['same_speech']} the same speech only" if s["same_speech"] else ""
    console.print(
        f"{status}: {s['failures']} violation(s), {s['unseeded']} unseeded difference(s){same}, "
        f"{s['cases']} comparisons in {s['elapsed_s']:.1f} s{compiled}{warned}"
    )


def conclude(
    out: Console,
    err: Console,
    result: AuditResult,
    golden: GoldenCheck | None,
    written: list[Path],
    report_dir: Path | None,
    saved_golden: Path | None,
    golden_asked: bool,
) -> int:
    """The audit's terminal report, where its files went, and its verdict in a line or two on stderr;
    returns the exit code (0 passed, 1 violations or drift, 2 incomplete, 128 + a signal's number)."""
    render(out, result, golden)
    if result.server:
        from .server_report import render_server

        render_server(out, result)
    if report_dir is not None:
        out.print(f"report: {report_dir / 'index.html'}", highlight=False, soft_wrap=True)
    if saved_golden is not None:
        out.print(f"golden baseline saved: {saved_golden}", highlight=False, soft_wrap=True)
    s = summary(result, golden)
    if result.stopped is not None:
        shown = [str(path) for path in written if not path.name.startswith(".")]  # not the report folder's mark
        kept = f"; the reports hold the {s['cases']} comparisons made before ({', '.join(shown)})" if shown else ""
        baseline = "; no golden baseline saved or checked" if saved_golden or golden_asked else ""
        err.print(
            f"[bold red]error:[/] {escape(result.stopped.error + kept)}{baseline}", highlight=False, soft_wrap=True
        )
        return 2 if result.stopped.signum is None else 128 + result.stopped.signum
    if s["failures"]:
        err.print(f"audit found violations ({s['failures']})", style="red")
    if UNSEEDED_NOT_REPRODUCIBLE in s["causes"]:
        err.print(
            f"{s['causes'][UNSEEDED_NOT_REPRODUCIBLE]} comparison(s) of unseeded requests are not reproducible alone "
            "(see each detail for the causes); --allow-unseeded accepts them as a warning",
            style="red",
            soft_wrap=True,
        )
    if golden is not None and not golden.passed:
        err.print(f"golden drift: {golden.describe()}", style="red", soft_wrap=True, markup=False)
    if s["warnings"]:
        err.print(
            f"{s['warnings']} warning(s): requests with different content produced identical codes or audio "
            "(a likely mix-up; see the report)",
            style="yellow",
        )
    return s["exit_code"]


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
    from ..io.audio import write_audio
    from .page import audit_view, pair_files

    doc = to_json(result, golden)
    text_md = markdown(result, golden)

    def response(scenario: str, run: str, key: str):
        return result.reference[key] if scenario == "reference" else result.outputs[(scenario, run)][key]

    def pairs(folder: Path) -> None:
        for case in result.cases:
            if case.verdict == "pass":
                continue
            first = result.reference[case.request]  # alone, or the response whose audio it has
            if case.other is not None:
                first = response(case.scenario, case.run, case.other)
            pair = [first, response(case.scenario, case.run, case.request)]
            for (_, relative), out in zip(pair_files(case.scenario, case.run, case.request, case.other), pair):
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                write_audio(folder / relative, out.pcm, result.sample_rate, "wav")

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


REPORT_DIR_FILES = {"--json": "audit.json", "--junit": "junit.xml", "--markdown": "summary.md"}
