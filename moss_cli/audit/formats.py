"""Audit reports for machines and CI: JSON (everything), JUnit XML (xunit2) and Markdown."""

from __future__ import annotations

import datetime as _dt
from xml.etree import ElementTree as ET

from .. import __version__
from ..report.files import json_safe
from .compare import format_audio, format_divergence
from .golden import GoldenCheck
from .questions import composed_cases, seed_cases
from .runner import AuditResult
from .server_report import server_markdown
from .summary import QUESTIONS, outcome, question_lines, summary, words_line, worst_cases
from .verdicts import SAME_SPEECH, Case

# Version 3: the seed and numerics questions answered apart (`questions`, and each server path's);
# each comparison says whether it was alone and, at --level speech, its speech measures. Version 2:
# each request's verdict over all its comparisons (`verdicts`; a server audit's `server.requests`).
FORMAT = "moss-audit/3"


def to_json(result: AuditResult, golden: GoldenCheck | None) -> dict:
    return json_safe(
        {
            "format": FORMAT,
            "tool": "moss audit-determinism",
            "version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "summary": summary(result, golden),
            "questions": result.questions,
            "options": {
                "level": result.options.level,
                "min_snr_db": result.options.min_snr_db,
                "scenarios": list(result.options.scenarios or ()),
                "strict_unseeded": result.options.strict_unseeded,
                "allow_unseeded": result.options.allow_unseeded,
                # a server audit cannot know: the server's own settings decide
                "legacy_global_rng": None if result.server else result.options.synth.legacy_global_rng,
                "requests": str(result.options.requests) if result.options.requests else "built-in",
                "command": result.options.command,
            },
            "environment": result.environment,
            **({"server": result.server} if result.server else {}),
            "reference": {
                key: {"frames": out.frames, "pcm_sha256": out.pcm_sha256, "seed_source": out.seed_source}
                for key, out in result.reference.items()
            },
            "streaming": {
                "schedule": result.chunk_schedule,
                "chunks": {
                    f"{scenario}/{run}": {key: out.chunks for key, out in outs.items()}
                    for (scenario, run), outs in result.outputs.items()
                    if any(o.chunks is not None for o in outs.values())
                },
            },
            "verdicts": result.verdicts,
            "cases": [case.as_dict() for case in result.cases],
            "warnings": [m.as_dict() for m in result.mixups],
            "golden": None if golden is None else golden.as_dict(),
        }
    )


def _failure_text(case: Case) -> str:
    cmp = case.comparison
    lines = [
        f"{case.request} in {case.scenario}/{case.run}: {case.attribution.cause if case.attribution else 'differs'}"
    ]
    if case.attribution:
        lines.append(case.attribution.detail)
    if cmp is not None and not cmp.codes_equal and cmp.first_frame is not None:
        lines.append(
            f"first diverging frame {cmp.first_frame}, codebook {cmp.first_codebook}; "
            f"frames {cmp.frames_reference} alone vs {cmp.frames_other}"
        )
    elif cmp is not None and cmp.first_diverging_s is not None:  # a server: no codes to point into
        lines.append(f"first differing {format_divergence(cmp)}")
    if cmp is not None:
        lines.append(f"PCM equal: {cmp.pcm_equal}; {format_audio(cmp)}")
    if case.speech is not None:
        lines.append(f"speech: {case.speech.describe()}")
    if case.words is not None:
        lines.append(f"words: {case.words.describe()}")
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
        suite = _suite(
            root,
            f"audit.{scenario}",
            len(cases),
            sum(c.failed for c in cases),
            sum(c.verdict == "unseeded" for c in cases),
            _seconds(took),
        )
        for case in cases:
            tc = ET.SubElement(
                suite,
                "testcase",
                classname=f"audit.{scenario}.{case.run}",
                name=case.request,
                time=_seconds(case.wall_s),
            )
            if case.failed:
                cause = case.attribution.cause if case.attribution else "differs"
                failure = ET.SubElement(
                    tc, "failure", message=f"{cause}: {case.attribution.detail if case.attribution else ''}", type=cause
                )
                failure.text = _failure_text(case)
            elif case.verdict == "unseeded":
                ET.SubElement(tc, "skipped", message="unseeded request: drawn from the global RNG, expected to vary")
        _system_err(suite, _warnings_for(result, scenario))
        total += len(cases)
        failures += sum(c.failed for c in cases)
        skipped += sum(c.verdict == "unseeded" for c in cases)
    for key in QUESTIONS:
        if key in result.questions:
            counted = _question_suite(root, result, key)
            total, failures, skipped = total + counted[0], failures + counted[1], skipped + counted[2]
    if result.server:
        counted = _paths_suite(root, result)
        total, failures, skipped = total + counted[0], failures + counted[1], skipped + counted[2]
    if golden is not None:
        took = sum(out.wall_s for out in result.reference.values())
        suite = _suite(
            root, "audit.golden", len(result.reference), len(golden.drifts), len(golden.not_in_baseline), _seconds(took)
        )
        drifted = {d.request: d for d in golden.drifts}
        new = set(golden.not_in_baseline)
        causes = "; ".join(golden.causes) or "unknown (same seeds and environment as recorded)"
        for key, out in result.reference.items():
            tc = ET.SubElement(suite, "testcase", classname="audit.golden", name=key, time=_seconds(out.wall_s))
            if key in drifted:
                d = drifted[key]
                f = ET.SubElement(
                    tc, "failure", message=f"drift: {d.detail}" + (f" ({d.cause})" if d.cause else ""), type="drift"
                )
                f.text = f"{d.detail}\nlikely cause: {causes}"
            elif key in new:
                ET.SubElement(tc, "skipped", message="not in the baseline: save a new one to include it")
        _system_err(suite, _warnings_for(result, None))
        total += len(result.reference)
        failures += len(golden.drifts)
        skipped += len(new)
    errors = 0
    if result.stopped is not None:  # the scenarios never run, as one error: CI shows why the audit stopped
        suite = _suite(root, "audit.incomplete", 1, 0, 0, _seconds(0.0))
        suite.set("errors", "1")
        tc = ET.SubElement(suite, "testcase", classname="audit.incomplete", name=result.stopped.scenario, time="0")
        ET.SubElement(tc, "error", message=result.stopped.sentence, type="incomplete").text = result.stopped.sentence
        total, errors = total + 1, 1
    root.set("tests", str(total))
    root.set("time", _seconds(result.elapsed_s))
    root.set("failures", str(failures))
    root.set("errors", str(errors))
    root.set("skipped", str(skipped))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _question_suite(root: ET.Element, result: AuditResult, key: str) -> tuple[int, int, int]:
    """One question (audit.seed, audit.numerics): a testcase per request it judged, timed by its
    comparisons there, failed where the request fails that question, skipped (with why) where it
    only warns there."""
    answer = result.questions[key]
    warned = answer.get("warned") or {}
    if key == "numerics":
        warned = {r: NUMERIC_WARNING for r in answer["differ"] if r not in answer["failed"]}
    judged: dict[str, float] = {}
    for case in seed_cases(result.cases) if key == "seed" else composed_cases(result.cases):
        judged[case.request] = judged.get(case.request, 0.0) + case.wall_s
    failures = sum(r in answer["failed"] for r in judged)
    skipped = sum(r in warned and r not in answer["failed"] for r in judged)
    suite = _suite(root, f"audit.{key}", len(judged), failures, skipped, _seconds(sum(judged.values())))
    for request, took in judged.items():
        tc = ET.SubElement(suite, "testcase", classname=f"audit.{key}", name=request, time=_seconds(took))
        if request in answer["failed"]:
            cause = answer["failed"][request]
            ET.SubElement(tc, "failure", message=f"{cause}: {answer['line']}", type=cause).text = answer["line"]
        elif request in warned:
            ET.SubElement(tc, "skipped", message=warned[request])
    ET.SubElement(suite, "system-out").text = answer["line"]
    return len(judged), failures, skipped


NUMERIC_WARNING = "numeric-batch-variance: other bits in a composition, the same speech (a warning)"


def _paths_suite(root: ET.Element, result: AuditResult) -> tuple[int, int, int]:
    """A server audit's table path x verdict: one testcase per path, failed where a comparison of
    what it answered failed (naming the requests), skipped where nothing went that way."""
    paths = result.server["paths"]
    took = {path: sum(c.wall_s for c in result.cases if c.path == path) for path in paths}
    failures = sum(v["passed"] is False for v in paths.values())
    skipped = sum(v["passed"] is None for v in paths.values())
    suite = _suite(root, "audit.paths", len(paths), failures, skipped, _seconds(sum(took.values())))
    for path, v in paths.items():
        tc = ET.SubElement(suite, "testcase", classname="audit.paths", name=path, time=_seconds(took[path]))
        if v["passed"] is False:
            named = ", ".join(f"{key} ({cause})" for key, cause in v["failed"].items())
            failure = ET.SubElement(tc, "failure", message=f"{v['verdict']}: {named}", type=v["verdict"])
            failure.text = f"{v['where']}: {v['detail']}"
        elif v["passed"] is None:
            ET.SubElement(tc, "skipped", message=f"{v['verdict']}: {v['detail']}")
    return len(paths), failures, skipped


def _suite(root: ET.Element, name: str, tests: int, failures: int, skipped: int, time: str) -> ET.Element:
    """A JUnit testsuite with its counts (an error is the audit's stop alone: `audit.incomplete`)."""
    counts = {"tests": tests, "failures": failures, "errors": 0, "skipped": skipped}
    return ET.SubElement(root, "testsuite", name=name, **{k: str(v) for k, v in counts.items()}, time=time)


def _system_err(suite: ET.Element, warnings: list[str]) -> None:
    """Warnings go to the suite's stderr: CI shows them without counting a failure."""
    if warnings:
        ET.SubElement(suite, "system-err").text = "\n".join(f"warning: {w}" for w in warnings)


def markdown(result: AuditResult, golden: GoldenCheck | None) -> str:
    env = result.environment
    s = summary(result, golden)
    icon = "✅" if s["passed"] else "❌"
    engine = f"{env['device']} ({env['dtype']}, torch {env['torch_version']})" if "torch_version" in env else None
    if "server" in env:  # a server's engine is known where it reports it (moss serve)
        where = f"against the server `{env['server']}`" + (f", on {engine}" if engine else "")
    else:
        where = f"on {engine}"
    out = [
        f"## {icon} moss audit-determinism: {'passed' if s['passed'] else outcome(s)}",
        "",
        *([f"**{result.stopped.sentence}**", ""] if result.stopped is not None else []),
        *(f"- **{line.split(': ', 1)[0]}**: {line.split(': ', 1)[1]}" for line in question_lines(result)),
        *([f"- **Words**: {words_line(result).split(': ', 1)[1]}"] if words_line(result) else []),
        "",
        f"Level `{s['level']}`, {s['requests']} requests, {s['cases']} comparisons, {s['elapsed_s']:.1f} s {where}.",
        "",
        "| scenario | pass | fail | unseeded | same speech |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, counts in s["scenarios"].items():
        counted = " | ".join(str(counts.get(k, 0)) for k in ("pass", "fail", "unseeded", SAME_SPEECH))
        out.append(f"| {name} | {counted} |")
    worst = worst_cases(result)
    if worst:
        out += [
            "",
            "### Violations",
            "",
            "| request | scenario/run | cause | first divergence | audio | detail |",
            "|---|---|---|---|---|---|",
        ]
        for case in worst[:20]:
            cmp = case.comparison
            where = "-" if cmp is None else format_divergence(cmp)
            audio = "-" if cmp is None else format_audio(cmp)
            out.append(
                f"| {case.request} | {case.scenario}/{case.run} | {case.attribution.cause} | {where} | "
                f"{audio} | {case.attribution.detail} |"
            )
    if result.server:
        out += server_markdown(result)
    if result.mixups:
        out += ["", f"### ⚠️ Warnings ({len(result.mixups)})", ""]
        out += [f"- {m.message}" for m in result.mixups]
    if golden is not None:
        drift = "no drift" if golden.passed else f"{len(golden.drifts)} drifted"
        out += [
            "",
            f"### Golden baseline `{golden.path.name}`: {drift}",
        ]
        if not golden.passed or golden.membership:
            out += ["", golden.describe(), ""]
        # Each changed request next to what changed in the environment since the baseline.
        changed = "; ".join(f"`{k}`: `{a}` → `{b}`" for k, (a, b) in golden.environment_changes.items()) or "none"
        if golden.drifts:
            out += ["| request changed | what changed | its own cause | environment fields changed |", "|" + "---|" * 4]
            out += [f"| `{d.request}` | {d.detail} | {d.cause or '-'} | {changed} |" for d in golden.drifts]
        elif golden.environment_changes:
            out.append(f"- environment fields changed: {changed}")
    if s["unseeded"]:
        out += [
            "",
            f"{s['unseeded']} comparison(s) of unseeded requests differed; they draw from the global RNG "
            "and are expected to vary (use a deploy seed, or `--strict-unseeded` to fail on them).",
        ]
    return "\n".join(out) + "\n"
