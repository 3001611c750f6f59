"""Audit reports: a Rich table for people, JSON (everything), JUnit XML (xunit2) and Markdown for CI."""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections import Counter
from pathlib import Path
from xml.etree import ElementTree as ET

from rich.console import Console
from rich.table import Table

from .. import __version__
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
            "elapsed_s": round(result.elapsed_s, 3)}


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
        snr = "inf" if cmp.snr_db is None else f"{cmp.snr_db:.1f}"
        lines.append(f"PCM equal: {cmp.pcm_equal}; max abs diff {cmp.max_abs_diff:.3g}; SNR {snr} dB; "
                     f"log-spectral distance {cmp.log_spectral_distance:.3g} dB")
    return "\n".join(lines)


def junit_xml(result: AuditResult, golden: GoldenCheck | None) -> str:
    """xunit2-style: one testsuite per scenario, one testcase per scenario x request."""
    root = ET.Element("testsuites", name="moss audit-determinism")
    suites: dict[str, list[Case]] = {}
    for case in result.cases:
        suites.setdefault(case.scenario, []).append(case)
    total = failures = skipped = 0
    for scenario, cases in suites.items():
        suite = ET.SubElement(root, "testsuite", name=f"audit.{scenario}", tests=str(len(cases)),
                              failures=str(sum(c.failed for c in cases)), errors="0",
                              skipped=str(sum(c.verdict == "unseeded" for c in cases)), time="0")
        for case in cases:
            tc = ET.SubElement(suite, "testcase", classname=f"audit.{scenario}.{case.run}", name=case.request, time="0")
            if case.failed:
                cause = case.attribution.cause if case.attribution else "differs"
                failure = ET.SubElement(tc, "failure", message=f"{cause}: {case.attribution.detail if case.attribution else ''}",
                                        type=cause)
                failure.text = _failure_text(case)
            elif case.verdict == "unseeded":
                ET.SubElement(tc, "skipped", message="unseeded request: drawn from the global RNG, expected to vary")
        total += len(cases)
        failures += sum(c.failed for c in cases)
        skipped += sum(c.verdict == "unseeded" for c in cases)
    if golden is not None:
        suite = ET.SubElement(root, "testsuite", name="audit.golden", tests=str(len(result.reference)),
                              failures=str(len(golden.drifts)), errors="0", skipped="0", time="0")
        drifted = {d.request: d for d in golden.drifts}
        for key in result.reference:
            tc = ET.SubElement(suite, "testcase", classname="audit.golden", name=key, time="0")
            if key in drifted:
                env = ", ".join(f"{k}: {a} -> {b}" for k, (a, b) in golden.environment_changes.items()) or "none"
                f = ET.SubElement(tc, "failure", message=f"drift: {drifted[key].detail}", type="drift")
                f.text = f"{drifted[key].detail}\nenvironment changes: {env}"
        total += len(result.reference)
        failures += len(golden.drifts)
    root.set("tests", str(total))
    root.set("failures", str(failures))
    root.set("errors", "0")
    root.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def markdown(result: AuditResult, golden: GoldenCheck | None) -> str:
    s = summary(result, golden)
    icon = "✅" if s["passed"] else "❌"
    out = [f"## {icon} moss audit-determinism: {'passed' if s['passed'] else 'FAILED'}", "",
           f"Level `{s['level']}`, {s['requests']} requests, {s['cases']} comparisons, {s['elapsed_s']:.1f} s "
           f"on {result.environment['device']} ({result.environment['dtype']}, torch {result.environment['torch_version']}).",
           "", "| scenario | pass | fail | unseeded |", "|---|---:|---:|---:|"]
    for name, counts in s["scenarios"].items():
        out.append(f"| {name} | {counts.get('pass', 0)} | {counts.get('fail', 0)} | {counts.get('unseeded', 0)} |")
    worst = _worst(result)
    if worst:
        out += ["", "### Violations", "", "| request | scenario/run | cause | first divergence | detail |",
                "|---|---|---|---|---|"]
        for case in worst[:20]:
            cmp = case.comparison
            where = "-" if cmp is None or cmp.codes_equal else f"frame {cmp.first_frame}, codebook {cmp.first_codebook}"
            out.append(f"| {case.request} | {case.scenario}/{case.run} | {case.attribution.cause} | {where} | "
                       f"{case.attribution.detail} |")
    if golden is not None:
        out += ["", f"### Golden baseline `{golden.path.name}`: {'no drift' if golden.passed else f'{len(golden.drifts)} drifted'}"]
        for d in golden.drifts:
            out.append(f"- `{d.request}`: {d.detail}")
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
    worst = _worst(result)
    if worst:
        offenders = Table(title="worst offenders (earliest divergence first)")
        for column in ("request", "scenario/run", "cause", "frame", "codebook", "detail"):
            offenders.add_column(column, overflow="fold")
        for case in worst[:10]:
            cmp = case.comparison
            offenders.add_row(case.request, f"{case.scenario}/{case.run}", case.attribution.cause,
                              str(cmp.first_frame), str(cmp.first_codebook), case.attribution.detail)
        console.print(offenders)
    if golden is not None:
        console.print(f"golden {golden.path}: " + ("[green]no drift[/]" if golden.passed else
                                                    f"[red]{len(golden.drifts)} request(s) drifted[/]"))
        for k, (a, b) in golden.environment_changes.items():
            console.print(f"  environment {k}: {a} -> {b}")
    status = "[bold green]PASSED[/]" if s["passed"] else "[bold red]FAILED[/]"
    console.print(f"{status}: {s['failures']} violation(s), {s['unseeded']} unseeded difference(s), "
                  f"{s['cases']} comparisons in {s['elapsed_s']:.1f} s")


def write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
