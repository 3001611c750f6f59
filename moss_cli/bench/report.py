"""`moss bench --server`'s reports: the terminal's table, legend and verdict (`render`), the JSON, and
a report folder with the JSON, the audio of the responses that varied next to
their request alone, latency-against-concurrency plots per arm and the HTML page (report/page.py)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from .. import __version__
from ..io.audio import write_audio
from ..measures.judgement import DIFFERENT_SPEECH, DIFFERENT_WORDS, IDENTICAL, SAME_SPEECH, WITHIN_SNR, judged_metrics
from ..measures.waveform import audio_metrics
from ..remote.paths import PATHS
from ..report.files import check_output_paths, json_safe, write_report_files
from ..report.page import Figure, PageView, PairView, Table, level_text
from ..report.terminal import print_table
from .server import (
    DIFFERING,
    FAILED,
    VARIED,
    VARIED_UNSEEDED,
    Checked,
    ServerBenchReport,
    describe,
)

REPORT_FILES = {"--json": "bench.json"}
PLOT = "plots/against-concurrency.png"
PLOT_TITLE = "latency, throughput, RTF and (with --asr-model) WER against concurrency, per arm"
SHOWN = 20  # responses that varied, named on the terminal
# The terminal's columns: (header, the key of a result row); figures are vllm-omni's names.
COLUMNS = (
    ("conc.", "max_concurrency"),
    ("arm", "arm"),
    ("done", "completed"),
    ("failed", "failed"),
    ("req/s", "request_throughput"),
    ("audio s/s", "audio_throughput"),
    ("TTFP p50", "median_audio_ttfp_ms"),
    ("TTFP p99", "p99_audio_ttfp_ms"),
    ("E2EL p50", "median_e2el_ms"),
    ("E2EL p99", "p99_e2el_ms"),
    ("RTF p50", "median_audio_rtf"),
    ("cont.", "audio_continuity_ok_rate"),
)
# The cost columns: the arm's figure over the unseeded arm's (median of the rounds [min-max]).
COST_COLUMNS = (("TTFP/u", "median_audio_ttfp_ms"), ("RTF/u", "median_audio_rtf"), ("audio/u", "audio_throughput"))
LEGEND = (
    "vllm bench serve's figures: TTFP time to first audio packet and E2EL end-to-end latency (ms), RTF latency / audio "
    "duration, cont.: the share of streams a real-time player never waited on for over 0.1 s; checked: identical to "
    "the same request alone / varied; x/u: the arm's TTFP p50, RTF p50, audio s/s over the unseeded arm's, median of "
    "the rounds [min-max]"
)


def check_outputs(json_path: Path | None, report_dir: Path | None) -> None:
    check_output_paths({"--json": json_path}, report_dir, REPORT_FILES)


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 100 else f"{value:.0f}"
    return str(value)


def _ratio(values: list[float] | None) -> str:
    return "-" if not values else f"{values[0]:.2f} [{values[1]:.2f}-{values[2]:.2f}]"


def _ordered(report: ServerBenchReport) -> list[dict]:
    arms = report.setup["arms"]
    return sorted(report.results, key=lambda r: (r["max_concurrency"], arms.index(r["arm"])))


def words_cells(words: dict | None) -> list[str]:
    """--asr-model: the corpus error rate under load, its difference from alone with the 95% interval, and
    its difference from the lowest concurrency with its interval."""
    if not words or words.get("passed") is None:
        return ["-", "-", "-"]
    low, high = words["interval"]
    here = f"{words['error_rate']:.1%}" + (f" ({words['above_half']} >50%)" if words["above_half"] else "")
    alone = f"{words['difference']:+.1%} [{low:+.1%}, {high:+.1%}]" + ("" if words["passed"] else " FAIL")
    lowest = words.get("against_lowest") or {}
    if lowest.get("requests"):
        a, b = lowest["interval"]
        versus = f"{lowest['difference']:+.1%} [{a:+.1%}, {b:+.1%}]"
    else:
        versus = "-"
    return [here, alone, versus]


WORDS_HEADERS = ["WER", "WER-alone", "WER-c.low"]


def table(report: ServerBenchReport) -> tuple[list[str], list[list[str]]]:
    """The terminal table: headers and rows of text, one row per concurrency and arm; with --asr-model, the
    error-rate columns (WORDS_HEADERS) after the checks."""
    words = any("words" in r for r in report.results)
    headers = [h for h, _ in COLUMNS] + ["checked"] + (WORDS_HEADERS if words else []) + [h for h, _ in COST_COLUMNS]
    rows = []
    for r in _ordered(report):
        checks = r["checks"]
        if report.setup["level"] == "speech":  # bitwise equal / the same speech / different speech
            wrong = checks[DIFFERENT_SPEECH] + checks[DIFFERENT_WORDS]
            checked = f"{checks['identical']}/{checks[SAME_SPEECH]}/{wrong}" + (" FAIL" if wrong else "")
        else:
            varied = checks[VARIED] + checks[VARIED_UNSEEDED]
            checked = f"{checks['identical'] + checks[WITHIN_SNR]}/{varied}" + (" FAIL" if checks[VARIED] else "")
        cost = report.over_unseeded.get(r["arm"], {}).get(str(r["max_concurrency"]), {})
        said = words_cells(r.get("words")) if words else []
        rows.append(
            [_cell(r.get(key)) for _, key in COLUMNS]
            + [checked, *said]
            + [_ratio(cost.get(key)) for _, key in COST_COLUMNS]
        )
    return headers, rows


def verdict(report: ServerBenchReport) -> list[str]:
    """What the checks found, for the terminal: a line per response that failed or varied (the first
    SHOWN; the JSON names every one), then the verdict."""
    lines = [f"{c.label} ({c.where}) failed: {c.error}" for c in report.responses if c.check == FAILED]
    lines += [describe(c) for c in report.responses if c.check in DIFFERING]
    if len(lines) > SHOWN:
        lines = lines[:SHOWN] + [f"... and {len(lines) - SHOWN} more (the JSON's summary names every one)"]
    if report.unseeded_causes():
        lines.append(report.unseeded_causes())
    lines += report.words_lines()
    held = [a for a in report.setup["arms"] if a != "unseeded" or report.setup["unseeded_must_hold"]]
    must = ", ".join(held) if held else "no"
    total = len(report.responses)
    if report.passed:
        lines.append(f"PASS: {total} responses under load; every {must} one gave its request's audio alone")
    elif not report.failures:
        lines.append(f"FAIL: the words under load: {total} responses; {report.words_failures()[0]}")
    else:
        lines.append(
            f"FAIL: {len(report.failures)} of {total} responses under load failed or differ from their request alone "
            f"(the {must} arm(s) must not)"
        )
    return lines


def render(console: Console, report: ServerBenchReport) -> None:
    """The terminal's report: the table, its legend, then the verdict."""
    s = report.setup
    headers, rows = table(report)
    title = (
        f"moss bench --server {escape(s['server'])}: {s['arrivals']}, {s['rounds']} round(s), {s['response_format']} "
        f"{PATHS[s['path']].answers[0]}, level {s['level']}"
    )
    print_table(console, headers, [[escape(c) for c in row] for row in rows], title=title, right=set(headers) - {"arm"})
    console.print(LEGEND, style="dim", highlight=False, markup=False)
    for line in verdict(report):
        console.print(line, highlight=False, markup=False, soft_wrap=True)


def to_json(report: ServerBenchReport) -> str:
    doc = {"tool": "moss bench", "version": __version__, "created": _now(), **report.as_dict()}
    return json.dumps(json_safe(doc), indent=2) + "\n"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def write_reports(report: ServerBenchReport, json_path: Path | None, report_dir: Path | None, command: str) -> list:
    text = to_json(report)
    pairs = _pairs(report)

    def files(folder: Path) -> None:
        if pairs:
            (folder / "diverging").mkdir()
        for pair, (alone, loaded) in pairs:
            for (_, path), reply in zip(pair.audio, (alone, loaded)):
                write_audio(folder / path, reply.pcm, reply.sample_rate, "wav")
        _plot(folder, report)

    def view() -> PageView:
        return page_view(report, [pair for pair, _ in pairs], command)

    return write_report_files({"--json": lambda: text}, {"--json": json_path}, report_dir, REPORT_FILES, files, view)


def _pairs(report: ServerBenchReport) -> list[tuple[PairView, tuple]]:
    """The responses that varied and whose audio was kept, each with its request alone."""
    out = []
    for n, c in enumerate((c for c in report.responses if id(c) in report.kept), start=1):
        cmp = c.comparison or {}
        pair = PairView(
            anchor=f"pair-{n}",
            title=f"{c.label}: {c.where}",
            status="unseeded" if c.check == VARIED_UNSEEDED else "fail",
            detail=describe(c),
            audio=[("alone", f"diverging/{n}-alone.wav"), ("under load", f"diverging/{n}-under-load.wav")],
            metrics=audio_metrics(cmp) + judged_metrics(c.speech, c.words),
            mark_s=cmp.get("first_diverging_s"),
        )
        out.append((pair, (report.references[(c.arm, c.request)], report.kept[id(c)])))
    return out


def _plot(folder: Path, report: ServerBenchReport) -> None:
    series = {}
    for r in _ordered(report):
        series.setdefault(r["arm"], []).append(r)
    panels = []
    for ylabel, key in (
        ("TTFP p50 (ms)", "median_audio_ttfp_ms"),
        ("TTFP p99 (ms)", "p99_audio_ttfp_ms"),
        ("E2EL p50 (ms)", "median_e2el_ms"),
        ("E2EL p99 (ms)", "p99_e2el_ms"),
        ("audio s per s", "audio_throughput"),
        ("RTF p50", "median_audio_rtf"),
        ("WER under load (%)", "words.error_rate"),
    ):
        lines = {arm: _series(rows, key) for arm, rows in series.items()}
        if any(xs for xs, _ in lines.values()):
            panels.append((ylabel, lines))
    from ..report.plots import against_concurrency  # matplotlib loads only for a report folder

    against_concurrency(folder, panels, PLOT_TITLE, PLOT)


def _series(rows: list[dict], key: str) -> tuple[list, list]:
    """(concurrency, value) of a figure over one arm's rows; `words.error_rate`: the WER, in percent."""
    if key.startswith("words."):
        got = [
            (r["max_concurrency"], 100 * r["words"][key[6:]])
            for r in rows
            if r.get("words", {}).get(key[6:]) is not None
        ]
    else:
        got = [(r["max_concurrency"], r[key]) for r in rows if key in r]
    return [x for x, _ in got], [y for _, y in got]


def page_view(report: ServerBenchReport, pairs: list[PairView], command: str | None) -> PageView:
    s = report.setup
    passed = report.passed
    varied = sum(1 for c in report.responses if c.check in DIFFERING)
    facts = [
        ("verdict", "pass" if passed else "fail"),
        ("level", level_text(s["level"], s["min_snr_db"])),
        ("server", s["server"]),
        ("models", ", ".join(s["models"] or []) or "(not listed)"),
        ("arms", ", ".join(s["arms"])),
        ("concurrency", ", ".join(str(c) for c in s["concurrency"])),
        ("requests per arm and level", ", ".join(f"{c}: {n}" for c, n in s["num_requests"].items())),
        ("arrivals", s["arrivals"] + (f", {s['duration_s']} s per arm and level" if s["duration_s"] else "")),
        ("rounds", str(s["rounds"])),
        ("answers", f"{s['response_format']}, {s['stream']}"),
        ("deploy seed", f"{s['deploy_seed']} ({s['deploy']})" if s["deploy"] else "not given"),
        ("unseeded must hold", "yes" if s["unseeded_must_hold"] else "no: reported only (--allow-unseeded)"),
        *([("unseeded", report.unseeded_causes())] if report.unseeded_causes() else []),
        ("reference voice", s["reference_voice"]),
        ("command", command or "(not recorded)"),
    ]
    cost = Table(["concurrency", "arm"] + [f"{key} / unseeded" for key in _cost_keys(report)], [])
    for r in _ordered(report):
        if r["arm"] == "unseeded":
            continue
        ratios = report.over_unseeded.get(r["arm"], {}).get(str(r["max_concurrency"]), {})
        cost.rows.append([r["max_concurrency"], r["arm"]] + [_ratio(ratios.get(k)) for k in _cost_keys(report)])
    headers, rows = table(report)
    comparisons = Table(
        ["response", "concurrency", "arm", "round", "check", "E2EL ms", "TTFP ms", "audio s", "SNR dB", "in flight",
         "neighbours"],
        [],
        sortable=True,
    )  # fmt: skip
    order = {FAILED: 0, VARIED: 1, VARIED_UNSEEDED: 2}
    for c in sorted(report.responses, key=lambda c: order.get(c.check, 3)):
        comparisons.rows.append(_comparison_row(c))
        comparisons.classes.append({FAILED: "fail", VARIED: "fail", VARIED_UNSEEDED: "unseeded"}.get(c.check, ""))
    sections = [
        ("Figures per arm and concurrency", [Table(headers, rows)]),
        ("The cost of determinism: each arm over the unseeded arm", [cost] if cost.rows else ["No unseeded arm."]),
        ("Against concurrency", [Figure(PLOT_TITLE, PLOT)]),
    ]
    return PageView(
        title=f"moss bench --server: {'pass' if passed else 'fail'}",
        passed=passed,
        headline=verdict(report)[-1] + (f"; {varied} response(s) varied" if varied else ""),
        facts=facts,
        sections=sections,
        comparisons=comparisons,
        pairs=pairs,
        notes=[f"{r['request']}: {r['reason']}" for r in report.retries],
        footer=f"moss bench {__version__}, {_now()}",
    )


def _cost_keys(report: ServerBenchReport) -> list[str]:
    keys = []
    for arms in report.over_unseeded.values():
        for figures in arms.values():
            keys += [k for k in figures if k not in keys]
    return keys


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _comparison_row(c: Checked) -> list:
    snr = (c.comparison or {}).get("snr_db")
    identical = c.check == IDENTICAL
    in_flight = f"{c.in_flight_client}" + (f" (server {c.in_flight_server})" if c.in_flight_server else "")
    return [
        c.label,
        c.concurrency,
        c.arm,
        c.round + 1,
        c.check if c.error is None else f"failed: {c.error}",
        _ms(c.latency_s),
        _ms(c.audio_ttfp_s),
        "-" if c.audio_duration_s is None else f"{c.audio_duration_s:.2f}",
        "inf" if identical or snr is None else f"{snr:.2f}",
        in_flight if c.in_flight_client else "-",
        ", ".join(c.neighbours),
    ]
