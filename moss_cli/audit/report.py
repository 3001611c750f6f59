"""Audit reports: a Rich table for people, JSON (everything), JUnit XML (xunit2) and Markdown for CI."""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from .. import __version__
from ..errors import MossError
from ..io.atomic import write_text_atomic
from .compare import format_audio, format_db
from .golden import GoldenCheck
from .runner import AuditResult, Case


def _json_safe(value):
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def summary(result: AuditResult, golden: GoldenCheck | None) -> dict:
    by_scenario: dict[str, Counter] = {}
    for case in result.cases:
        by_scenario.setdefault(case.scenario, Counter())[case.verdict] += 1
    causes = Counter(case.attribution.cause for case in result.cases if case.failed and case.attribution)
    passed = result.passed and (golden is None or golden.passed)
    return {"passed": passed, "exit_code": 0 if passed else 1, "level": result.options.level,
            "requests": len(result.requests), "cases": len(result.cases),
            "failures": sum(c.failed for c in result.cases), "unseeded": sum(c.verdict == "unseeded" for c in result.cases),
            "scenarios": {name: dict(counts) for name, counts in by_scenario.items()},
            "causes": dict(causes), "golden_drift": None if golden is None else len(golden.drifts),
            "warnings": len(result.mixups), "elapsed_s": round(result.elapsed_s, 3)}


def outcome(s: dict) -> str:
    """PASSED, or FAILED with what failed: violations, golden drift or both."""
    if s["passed"]:
        return "PASSED"
    reasons = (["violations"] if s["failures"] else []) + (["golden drift"] if s["golden_drift"] else [])
    return f"FAILED ({' and '.join(reasons)})"


def to_json(result: AuditResult, golden: GoldenCheck | None) -> dict:
    return _json_safe({
        "tool": "moss audit-determinism", "version": __version__,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "summary": summary(result, golden),
        "options": {"level": result.options.level, "min_snr_db": result.options.min_snr_db,
                    "scenarios": list(result.options.scenarios), "strict_unseeded": result.options.strict_unseeded,
                    "legacy_global_rng": result.options.synth.legacy_global_rng,
                    "requests": str(result.options.requests) if result.options.requests else "built-in"},
        "environment": result.environment,
        "reference": {key: {"frames": int(out.codes.shape[0]), "pcm_sha256": out.pcm_sha256,
                            "seed_source": out.seed_source} for key, out in result.reference.items()},
        "streaming": {"schedule": result.chunk_schedule,
                      "chunks": {f"{scenario}/{run}": {key: out.chunks for key, out in outs.items()}
                                 for (scenario, run), outs in result.outputs.items()
                                 if any(o.chunks is not None for o in outs.values())}},
        "cases": [case.as_dict() for case in result.cases],
        "warnings": [m.as_dict() for m in result.mixups],
        "golden": None if golden is None else golden.as_dict(),
    })


def _failure_text(case: Case) -> str:
    cmp = case.comparison
    lines = [f"{case.request} in {case.scenario}/{case.run}: {case.attribution.cause if case.attribution else 'differs'}"]
    if case.attribution:
        lines.append(case.attribution.detail)
    if cmp is not None and not cmp.codes_equal:
        lines.append(f"first diverging frame {cmp.first_frame}, codebook {cmp.first_codebook}; "
                     f"frames {cmp.frames_reference} alone vs {cmp.frames_other}")
    if cmp is not None:
        lines.append(f"PCM equal: {cmp.pcm_equal}; {format_audio(cmp)}")
    return "\n".join(lines)


def _warnings_for(result: AuditResult, scenario: str | None) -> list[str]:
    """Warnings of one scenario's runs, plus those of the reference run (every comparison uses it)."""
    return [m.message for m in result.mixups if {"reference", scenario} & set(m.scenarios)]


def _seconds(value: float) -> str:
    return f"{value:.3f}"


def junit_xml(result: AuditResult, golden: GoldenCheck | None) -> str:
    """xunit2-style: one testsuite per scenario, one testcase per scenario x request."""
    root = ET.Element("testsuites", name="moss audit-determinism")
    suites: dict[str, list[Case]] = {}
    for case in result.cases:
        suites.setdefault(case.scenario, []).append(case)
    total = failures = skipped = 0
    for scenario, cases in suites.items():
        took = result.scenario_s.get(scenario, sum(c.wall_s for c in cases))
        suite = ET.SubElement(root, "testsuite", name=f"audit.{scenario}", tests=str(len(cases)),
                              failures=str(sum(c.failed for c in cases)), errors="0",
                              skipped=str(sum(c.verdict == "unseeded" for c in cases)), time=_seconds(took))
        for case in cases:
            tc = ET.SubElement(suite, "testcase", classname=f"audit.{scenario}.{case.run}", name=case.request,
                               time=_seconds(case.wall_s))
            if case.failed:
                cause = case.attribution.cause if case.attribution else "differs"
                failure = ET.SubElement(tc, "failure", message=f"{cause}: {case.attribution.detail if case.attribution else ''}",
                                        type=cause)
                failure.text = _failure_text(case)
            elif case.verdict == "unseeded":
                ET.SubElement(tc, "skipped", message="unseeded request: drawn from the global RNG, expected to vary")
        _system_err(suite, _warnings_for(result, scenario))
        total += len(cases)
        failures += sum(c.failed for c in cases)
        skipped += sum(c.verdict == "unseeded" for c in cases)
    if golden is not None:
        took = sum(out.wall_s for out in result.reference.values())
        suite = ET.SubElement(root, "testsuite", name="audit.golden", tests=str(len(result.reference)),
                              failures=str(len(golden.drifts)), errors="0", skipped="0", time=_seconds(took))
        drifted = {d.request: d for d in golden.drifts}
        causes = "; ".join(golden.causes) or "unknown (same seeds and environment as recorded)"
        for key, out in result.reference.items():
            tc = ET.SubElement(suite, "testcase", classname="audit.golden", name=key, time=_seconds(out.wall_s))
            if key in drifted:
                d = drifted[key]
                f = ET.SubElement(tc, "failure", message=f"drift: {d.detail}" + (f" ({d.cause})" if d.cause else ""),
                                  type="drift")
                f.text = f"{d.detail}\nlikely cause: {causes}"
        _system_err(suite, _warnings_for(result, None))
        total += len(result.reference)
        failures += len(golden.drifts)
    root.set("tests", str(total))
    root.set("time", _seconds(result.elapsed_s))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _system_err(suite: ET.Element, warnings: list[str]) -> None:
    """Warnings go to the suite's stderr: CI shows them without counting a failure."""
    if warnings:
        ET.SubElement(suite, "system-err").text = "\n".join(f"warning: {w}" for w in warnings)


def markdown(result: AuditResult, golden: GoldenCheck | None) -> str:
    s = summary(result, golden)
    icon = "✅" if s["passed"] else "❌"
    out = [f"## {icon} moss audit-determinism: {'passed' if s['passed'] else outcome(s)}", "",
           f"Level `{s['level']}`, {s['requests']} requests, {s['cases']} comparisons, {s['elapsed_s']:.1f} s "
           f"on {result.environment['device']} ({result.environment['dtype']}, torch {result.environment['torch_version']}).",
           "", "| scenario | pass | fail | unseeded |", "|---|---:|---:|---:|"]
    for name, counts in s["scenarios"].items():
        out.append(f"| {name} | {counts.get('pass', 0)} | {counts.get('fail', 0)} | {counts.get('unseeded', 0)} |")
    worst = _worst(result)
    if worst:
        out += ["", "### Violations", "", "| request | scenario/run | cause | first divergence | audio | detail |",
                "|---|---|---|---|---|---|"]
        for case in worst[:20]:
            cmp = case.comparison
            where = "-" if cmp is None or cmp.codes_equal else f"frame {cmp.first_frame}, codebook {cmp.first_codebook}"
            audio = "-" if cmp is None else format_audio(cmp)
            out.append(f"| {case.request} | {case.scenario}/{case.run} | {case.attribution.cause} | {where} | "
                       f"{audio} | {case.attribution.detail} |")
    if result.mixups:
        out += ["", f"### ⚠️ Warnings ({len(result.mixups)})", ""]
        out += [f"- {m.message}" for m in result.mixups]
    if golden is not None:
        out += ["", f"### Golden baseline `{golden.path.name}`: {'no drift' if golden.passed else f'{len(golden.drifts)} drifted'}"]
        if not golden.passed:
            out += ["", golden.describe(), ""]
        for d in golden.drifts:
            out.append(f"- `{d.request}`: {d.detail}" + (f" ({d.cause})" if d.cause else ""))
        for k, (a, b) in golden.environment_changes.items():
            out.append(f"- environment `{k}`: `{a}` → `{b}`")
    if s["unseeded"]:
        out += ["", f"{s['unseeded']} comparison(s) of unseeded requests differed; they draw from the global RNG "
                    "and are expected to vary (use a deploy seed, or `--strict-unseeded` to fail on them)."]
    return "\n".join(out) + "\n"


def _worst(result: AuditResult) -> list[Case]:
    failed = [c for c in result.cases if c.failed]
    return sorted(failed, key=lambda c: (c.comparison.first_frame if c.comparison and c.comparison.first_frame
                                         is not None else 10**9))


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
        verdict = "[green]pass[/]" if not counts.get("fail") else "[red]fail[/] (" + ", ".join(
            f"{k} x{v}" for k, v in causes.items()) + ")"
        table.add_row(name, ", ".join(sorted(runs[name])), str(counts.get("pass", 0)), str(counts.get("fail", 0)),
                      str(counts.get("unseeded", 0)), verdict)
    console.print(table)
    worst = _worst(result)[:10]
    if worst:
        # Short cells that never wrap (a long id is cut with an ellipsis, not broken mid-word); the
        # prose of each divergence goes below the table, where it wraps at spaces.
        offenders = Table(title="worst offenders (earliest divergence first)")
        for column in ("#", "request", "scenario/run", "cause", "frame:cb", "SNR dB"):
            offenders.add_column(column, no_wrap=True, overflow="ellipsis",
                                 justify="right" if column in ("#", "frame:cb", "SNR dB") else "left")
        for n, case in enumerate(worst, start=1):
            cmp = case.comparison
            offenders.add_row(str(n), case.request, f"{case.scenario}/{case.run}", case.attribution.cause,
                              f"{cmp.first_frame}:{cmp.first_codebook}", format_db(cmp.snr_db))
        console.print(offenders)
        for n, case in enumerate(worst, start=1):
            console.print(f"{n}. {escape(case.request)}: {escape(case.attribution.detail)} "
                          f"({escape(format_audio(case.comparison))})", highlight=False)
    for m in result.mixups:
        console.print(f"[yellow]warning:[/] {escape(m.message)}", highlight=False)  # wraps at spaces
    if golden is not None:
        console.print(f"golden {escape(str(golden.path))}: " + ("[green]no drift[/]" if golden.passed else
                                                                 f"[red]{escape(golden.describe())}[/]"),
                      soft_wrap=True)
        for k, (a, b) in golden.environment_changes.items():
            console.print(f"  environment {k}: {escape(str(a))} -> {escape(str(b))}")
    status = "[bold green]PASSED[/]" if s["passed"] else f"[bold red]{outcome(s)}[/]"
    warned = f", {s['warnings']} warning(s)" if s["warnings"] else ""
    console.print(f"{status}: {s['failures']} violation(s), {s['unseeded']} unseeded difference(s), "
                  f"{s['cases']} comparisons in {s['elapsed_s']:.1f} s{warned}")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)


def write_reports(result: AuditResult, golden: GoldenCheck | None, *, json_path: Path | None = None,
                  junit_path: Path | None = None, markdown_path: Path | None = None,
                  report_dir: Path | None = None) -> list[Path]:
    """Write the requested reports; `report_dir` gets all of them plus the audio of diverging pairs."""
    from ..io.audio import to_pcm16, write_audio

    written = []
    if report_dir is not None:
        json_path = json_path or report_dir / "audit.json"
        junit_path = junit_path or report_dir / "junit.xml"
        markdown_path = markdown_path or report_dir / "summary.md"
    text_md = markdown(result, golden)
    for path, text in ((json_path, lambda: json.dumps(to_json(result, golden), indent=2) + "\n"),
                       (junit_path, lambda: junit_xml(result, golden)), (markdown_path, lambda: text_md)):
        if path is not None:
            write_text(path, text())
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
            pair = {"alone": result.reference[case.request],
                    case.run: result.outputs[(case.scenario, case.run)][case.request]}
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
        files = {**{option: report_dir / name for option, name in REPORT_DIR_FILES.items()},
                 **{option: path for option, path in files.items() if path is not None}}
        diverging = report_dir / "diverging"
        if diverging.exists() and not diverging.is_dir():
            raise MossError("exists and is not a directory (the audio of diverging pairs goes there)",
                            file=diverging, field="--report-dir")
    for option, path in files.items():
        if path is None:
            continue
        if path.is_dir():
            raise MossError("is a directory; expected a file path", file=path, field=option)
        check_parent(path, option)
