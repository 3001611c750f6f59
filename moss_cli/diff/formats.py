"""`moss diff` reports for machines and CI: JSON (every id), JUnit XML (one testcase per id) and
Markdown; the HTML page is built from the JSON document (diff/page.py)."""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from xml.etree import ElementTree as ET

from .. import __version__
from ..measures.judgement import IDENTICAL, PASSING, STATUSES
from ..measures.waveform import format_metrics
from ..report.files import json_safe
from .compare import DiffCase, DiffResult

ORDER = {"fail": 0, "unseeded": 1, "pass": 2}


def summary(result: DiffResult) -> dict:
    status = Counter(c.status for c in result.cases)
    return {
        "passed": result.passed,
        "exit_code": 0 if result.passed else 1,
        "level": result.level,
        "min_snr_db": result.min_snr_db,
        "ids": len(result.cases),
        "identical": status["identical"],
        "within_tolerance": sum(n for k, n in status.items() if k in PASSING and k != IDENTICAL),
        "differ": sum(n for k, n in status.items() if k in STATUSES and k not in PASSING),
        "only_a": status["only-a"],
        "only_b": status["only-b"],
        "failures": sum(c.failed for c in result.cases),
        "unseeded": sum(c.verdict == "unseeded" for c in result.cases),
        "causes": dict(Counter(c.cause for c in result.cases if c.status != "identical")),
        "elapsed_s": round(result.elapsed_s, 3),
    }


def outcome(s: dict) -> str:
    if s["passed"]:
        return "IDENTICAL" if s["identical"] == s["ids"] else "PASSED"
    return f"DIFFERENT ({s['failures']} of {s['ids']} ids)"


def ordered(cases: list[DiffCase]) -> list[DiffCase]:
    """Failures first, then unseeded differences, then the rest, each in input order."""
    return sorted(cases, key=lambda c: ORDER.get(c.verdict, 3))


def to_json(result: DiffResult, command: str | None = None) -> dict:
    return json_safe(
        {
            "tool": "moss diff",
            "version": __version__,
            "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "command": command,
            "summary": summary(result),
            "sides": {"a": result.a.describe(), "b": result.b.describe()},
            "environment_changes": {k: {"a": x, "b": y} for k, (x, y) in result.environment_changes.items()},
            "cases": [c.as_dict() for c in result.cases],
        }
    )


def metrics(case: DiffCase) -> str:
    if not case.audio_compared:
        return "-"
    return format_metrics(case.measures)


def junit_xml(result: DiffResult) -> str:
    s = summary(result)
    root = ET.Element("testsuites", name="moss diff", tests=str(s["ids"]), failures=str(s["failures"]))
    suite = ET.SubElement(
        root,
        "testsuite",
        name="diff",
        tests=str(s["ids"]),
        failures=str(s["failures"]),
        errors="0",
        skipped=str(s["unseeded"]),
        time=f"{result.elapsed_s:.3f}",
    )
    for case in result.cases:
        tc = ET.SubElement(suite, "testcase", classname="diff", name=case.id)
        if case.failed:
            failure = ET.SubElement(tc, "failure", message=f"{case.cause}: {case.detail}", type=case.cause)
            failure.text = f"{case.id}: {case.status}; {case.detail}\n{metrics(case)}"
        elif case.verdict == "unseeded":
            ET.SubElement(tc, "skipped", message=case.detail)
    root.set("errors", "0")
    root.set("skipped", str(s["unseeded"]))
    root.set("time", f"{result.elapsed_s:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _md(text: str) -> str:
    """Text from manifests inside a Markdown table cell: a `|` or a line break would end the cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def markdown(result: DiffResult, limit: int = 50) -> str:
    s = summary(result)
    icon = "✅" if s["passed"] else "❌"
    out = [
        f"## {icon} moss diff: {outcome(s)}",
        "",
        f"`{result.a.path}` ({result.a.kind}) vs `{result.b.path}` ({result.b.kind}), level `{s['level']}`: "
        f"{s['ids']} ids, {s['identical']} identical, {s['within_tolerance']} within tolerance, {s['differ']} "
        f"differ, {s['only_a']} only in A, {s['only_b']} only in B.",
    ]
    if s["causes"]:
        out += ["", "| likely cause | ids |", "|---|---:|"] + [f"| {k} | {v} |" for k, v in s["causes"].items()]
    if result.environment_changes:
        out += ["", "| environment field | A | B |", "|---|---|---|"]
        out += [f"| {k} | `{a}` | `{b}` |" for k, (a, b) in result.environment_changes.items()]
    differing = [c for c in ordered(result.cases) if c.status != "identical"]
    if differing:
        out += ["", "| id | status | cause | audio | detail |", "|---|---|---|---|---|"]
        out += [f"| {_md(c.id)} | {c.status} | {c.cause} | {metrics(c)} | {_md(c.detail)} |" for c in differing[:limit]]
        if len(differing) > limit:
            out.append(f"\n... and {len(differing) - limit} more (see the JSON report).")
    return "\n".join(out) + "\n"
