"""The HTML page of `moss diff` (on the shared renderer, report/page.py), built from its JSON document
and the audio copied into the report folder."""

from __future__ import annotations

from ..measures.judgement import judged_metrics
from ..measures.waveform import audio_metrics, metric_cells, metric_headers
from ..report.page import Link, PageView, PairView, Table, level_text, verdict_view
from .formats import outcome

ORDER = {"fail": 0, "unseeded": 1, "pass": 2}


def pair_files(n: int) -> list[tuple[str, str]]:
    """Where the report folder keeps the two clips of the n-th differing id: (label, relative path).
    Named by number: a manifest or golden file may hold any id, and no id may name a path."""
    return [("A", f"diverging/pair-{n}.a.wav"), ("B", f"diverging/pair-{n}.b.wav")]


def paired(cases: list[dict]) -> list[dict]:
    """The failing ids whose two clips were compared, in the page's order (failures first)."""
    return [c for c in sorted(cases, key=lambda c: ORDER.get(c["verdict"], 3)) if _has_pair(c)]


def _has_pair(case: dict) -> bool:
    return case["verdict"] != "pass" and bool(case.get("audio_compared")) and not case.get("pcm_equal")


def _dash(value, fmt=str) -> str:
    return "-" if value is None else fmt(value)


def _equal(value) -> str:
    return "-" if value is None else ("equal" if value else "differ")


def _side(case: dict, side: str, key: str):
    return (case.get(side) or {}).get(key)


def _pair(n: int, case: dict) -> PairView:
    frames = f"{_dash(_side(case, 'a', 'frames'))} / {_dash(_side(case, 'b', 'frames'))}"
    return PairView(
        anchor=f"pair-{n}",
        title=f"{case['id']}: {case['status']} ({case['cause']})",
        status=case["verdict"],
        detail=case.get("detail", ""),
        audio=pair_files(n),
        metrics=[
            ("likely cause", case["cause"]),
            ("seed (A / B)", f"{_dash(_side(case, 'a', 'seed'))} / {_dash(_side(case, 'b', 'seed'))}"),
            ("codes", _equal(case.get("codes_equal"))),
            ("frames (A / B)", frames),
            *audio_metrics(case),
            ("first differing sample", f"{_dash(case.get('first_diverging_s'), lambda v: f'{v:.3f}')} s"),
            *judged_metrics(case.get("speech"), case.get("words")),
        ],
        mark_s=case.get("first_diverging_s"),
        mark_label="first differing sample",
    )


def diff_view(doc: dict) -> PageView:
    s, sides = doc["summary"], doc["sides"]
    cases = sorted(doc["cases"], key=lambda c: ORDER.get(c["verdict"], 3))
    pairs = paired(doc["cases"])
    anchors = {c["id"]: f"pair-{n}" for n, c in enumerate(pairs, start=1)}
    rows = []
    for case in cases:
        duration = [_dash(_side(case, side, "duration_s")) for side in ("a", "b")]
        link = Link("audio and plots", f"#{anchors[case['id']]}") if case["id"] in anchors else ""
        rows.append(
            [case["verdict"], case["status"], case["id"], case["cause"], _equal(case.get("codes_equal"))]
            + [_equal(case.get("pcm_equal")), *duration, _dash(case.get("first_diverging_s"), lambda v: f"{v:.3f}")]
            + [*metric_cells(case, bool(case.get("audio_compared"))), link, case.get("detail", "")]
        )
    headers = ["status", "outcome", "id", "likely cause", "codes", "PCM", "duration A", "duration B", "second"]
    table = Table([*headers, *metric_headers(), "pair", "detail"], rows, [c["verdict"] for c in cases])
    table.sortable = True
    side_rows = [[k.upper(), v["path"], v["kind"], v["ids"], "yes" if v["journal"] else "no"] for k, v in sides.items()]
    causes = Table(["likely cause", "ids"], [[k, v] for k, v in s["causes"].items()] or [["none", 0]])
    sections = [
        ("Sides", [Table(["side", "path", "kind", "ids", "journal"], side_rows)]),
        ("Counts", [_counts(s), causes]),
    ]
    changes = doc.get("environment_changes") or {}
    if changes:
        changed = [[k, str(v["a"]), str(v["b"])] for k, v in changes.items()]
        sections.append(("Environment", [Table(["environment field changed", "A", "B"], changed)]))
    level = level_text(s["level"], s["min_snr_db"])
    facts = [(k.upper(), f"{sides[k]['path']} ({sides[k]['kind']})") for k in ("a", "b")] + [("ids", str(s["ids"]))]
    headline = (
        f"{s['failures']} of {s['ids']} ids differ beyond level {level}; {s['identical']} identical, "
        f"{s['only_a']} only in A, {s['only_b']} only in B."
    )
    pair_views = [_pair(n, c) for n, c in enumerate(pairs, start=1)]
    body = {"headline": headline, "sections": sections, "comparisons": table, "pairs": pair_views}
    return verdict_view(doc, "moss diff", outcome(s), level, facts, doc.get("command"), **body)


def _counts(s: dict) -> Table:
    names = ("identical", "within_tolerance", "differ", "only_a", "only_b")
    rows = [[name.replace("_", " "), s[name]] for name in names] + [["of which unseeded", s["unseeded"]]]
    return Table(["outcome", "ids"], rows)
