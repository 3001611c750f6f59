"""The audit's HTML page (on the shared renderer, report/page.py), built only from the JSON report's
document (`formats.to_json`) and the audio files in the report folder: a local audit and one run
against a server give the same page."""

from __future__ import annotations

from ..measures.judgement import judged_metrics
from ..measures.waveform import audio_metrics, metric_cells, metric_headers
from ..report.page import Link, Matrix, MatrixCell, PageView, PairView, Table, level_text, verdict_view
from .server_report import server_blocks
from .summary import QUESTIONS, outcome
from .verdicts import SAME_SPEECH

LOGITS_NOTE = (
    "Top logits: rank by rank, the request's largest logits in each composition at its first diverging draw "
    "(rng-coupling: equal logits, another random stream; numeric: the logits themselves differ)."
)


def pair_files(scenario: str, run: str, request: str, other: str | None = None) -> list[tuple[str, str]]:
    """Where the report folder keeps a diverging pair's audio: (label, relative path), alone first;
    with `other` (audio-of-another-request), that request's response in the same run first."""
    if other is not None:
        return [(f"{key} ({run})", f"diverging/{scenario}/{key}.{run}.wav") for key in (other, request)]
    return [(label, f"diverging/{scenario}/{request}.{label}.wav") for label in ("alone", run)]


def _rank(verdict: str) -> int:
    """Failures first, then any other difference (unseeded, or a verdict added later), then passes."""
    return 0 if verdict == "fail" else 2 if verdict == "pass" else 1


def _order(case: dict):
    cmp = case.get("comparison") or {}
    frame = cmp.get("first_frame")
    return (_rank(case["verdict"]), frame if frame is not None else 10**9)


def _seconds(value) -> str:
    return "-" if value is None else f"{value:.3f}"


def _or_dash(value) -> str:
    return "-" if value is None else str(value)


def _comparison_metrics(cmp: dict) -> list[tuple[str, str]]:
    return [
        ("codes", {True: "equal", False: "differ"}.get(cmp.get("codes_equal"), "unknown (no codes from the server)")),
        ("PCM", "identical" if cmp.get("pcm_equal") else "differs"),
        ("frames (alone / here)", f"{cmp.get('frames_reference')} / {cmp.get('frames_other')}"),
        *audio_metrics(cmp),
    ]


def logits_table(top: dict, labels: tuple[str, str]) -> Table:
    """Rank by rank, the largest logits of each side; rows whose tokens differ are marked."""
    a, b = top.get("reference") or [], top.get("other") or []
    rows, classes = [], []
    for rank in range(max(len(a), len(b))):
        left = a[rank] if rank < len(a) else [None, None]
        right = b[rank] if rank < len(b) else [None, None]
        rows.append([rank + 1, _or_dash(left[0]), _logit(left[1]), _or_dash(right[0]), _logit(right[1])])
        classes.append("fail" if left[0] != right[0] else "")
    headers = ["rank", f"token ({labels[0]})", "logit", f"token ({labels[1]})", "logit"]
    return Table(headers, rows, classes)


def _logit(value) -> str:
    return "-" if value is None else f"{value:.6g}"


def _pair(n: int, case: dict) -> PairView:
    cmp, why = case.get("comparison") or {}, case.get("attribution") or {}
    cause = why.get("cause", "differs")
    where = ""
    if cmp.get("first_frame") is not None:
        where = f", first diverging frame {cmp['first_frame']}, codebook {cmp['first_codebook']}"
    metrics = [("attribution", cause), ("seed source", case.get("seed_source", "-"))] + _comparison_metrics(cmp)
    metrics.append(("first divergence", f"{_seconds(cmp.get('first_diverging_s'))} s{where}"))
    metrics += judged_metrics(case.get("speech"), case.get("words"))
    if why.get("max_logit_diff") is not None:
        metrics.append(("largest logit difference", f"{why['max_logit_diff']:.3g} ({why.get('head')})"))
    pair = PairView(
        anchor=f"pair-{n}",
        title=f"{case['request']} in {case['scenario']}/{case['run']}: {cause}",
        status=case["verdict"],
        detail=why.get("detail", ""),
        audio=pair_files(case["scenario"], case["run"], case["request"], case.get("other")),
        metrics=metrics,
        mark_s=cmp.get("first_diverging_s"),
    )
    if why.get("top_logits"):
        pair.logits = logits_table(why["top_logits"], ("alone", case["run"]))
        pair.logits_note = f"Head {why.get('head')}, frame {why.get('frame')} ({cause})."
    return pair


def _column(case: dict) -> str:
    """A composition: the scenario, and for a server the path that answered."""
    return case["scenario"] + (f" ({case['path']})" if case.get("path") else "")


def _matrix(doc: dict, cases: list[dict], anchors: dict[int, str], level: str) -> Matrix:
    """Requests x compositions: each cell the first of its comparisons in `cases`' order (failures,
    then other differences, earliest divergence first), named by its cause, linking to its pair."""
    verdicts = doc.get("verdicts") or {}
    requests = list(dict.fromkeys([*verdicts, *(c["request"] for c in cases)]))
    columns = list(dict.fromkeys(_column(c) for c in doc["cases"]))
    cells: dict[tuple[str, str], list[dict]] = {}
    for case in cases:
        cells.setdefault((case["request"], _column(case)), []).append(case)
    rows = []
    for key in requests:
        row = []
        for column in columns:
            mine = cells.get((key, column))
            if not mine:
                row.append(None)
                continue
            first, differ = mine[0], sum(c["verdict"] != "pass" for c in mine)
            text = (first.get("attribution") or {}).get("cause", first["verdict"]) if differ else "pass"
            text += f" {differ or len(mine)}/{len(mine)}" if len(mine) > 1 else ""
            runs = ", ".join(f"{c['run']}: {c['verdict']}" for c in mine)
            row.append(MatrixCell(first["verdict"], text, f"#{anchors.get(id(first), 'comparisons')}", runs))
        verdict = verdicts.get(key, {}).get("verdict")
        rows.append((f"{key} ({verdict})" if verdict else key, row))
    shown = sorted({cell.status for _, row in rows for cell in row if cell}, key=_rank)
    meaning = {
        "fail": "a violation",
        "pass": f"the same as the request alone (level {level})",
        SAME_SPEECH: "other bits than alone, the same speech (numeric batch variance: a warning)",
    }
    legend = [(status, meaning.get(status, "differs, not a failure")) for status in shown]
    legend += [("absent", "not in that composition")] if any(None in row for _, row in rows) else []
    return Matrix(
        heading="Requests x scenarios" + (" and paths" if any(c.get("path") for c in cases) else ""),
        corner="request (its verdict)",
        columns=columns,
        rows=rows,
        legend=legend,
        note="Each cell names the cause of the request's first difference in that composition (with several runs, "
        "how many of them differ) and links to its audio and plots; hover for each run's verdict.",
    )


def _drift(golden: dict) -> list:
    """Golden drift: the requests that changed next to the environment fields that changed."""
    drifts = golden.get("drifts") or []
    requests = Table(
        ["request changed", "what", "detail", "its own cause"],
        [[d["request"], d["reason"], d["detail"], d.get("cause") or "-"] for d in drifts],
        ["fail"] * len(drifts),
    )
    changes = golden.get("environment_changes") or {}
    changed = [[k, str(v["golden"]), str(v["now"])] for k, v in changes.items()]
    environment = Table(["environment field changed", "golden", "now"], changed)
    blocks: list = [golden.get("summary", "")]
    blocks += [requests] if drifts else ["No request changed."]
    blocks += [environment] if changes else ["No recorded environment field changed."]
    if golden.get("environment_unknown"):
        blocks.append("Not recorded in the golden file: " + ", ".join(golden["environment_unknown"]))
    return blocks


def audit_view(doc: dict) -> PageView:
    s, options, env = doc["summary"], doc.get("options") or {}, doc.get("environment") or {}
    level = level_text(s["level"], options.get("min_snr_db"))
    cases = sorted(doc["cases"], key=_order)
    diverging = [c for c in cases if c["verdict"] != "pass"]
    anchors = {id(c): f"pair-{n}" for n, c in enumerate(diverging, start=1)}
    rows, classes = [], []
    for case in cases:
        cmp, why = case.get("comparison") or {}, case.get("attribution") or {}
        rows.append(
            [
                case["verdict"],
                case["scenario"],
                case["run"],
                case["request"],
                case.get("seed_source", "-"),
                why.get("cause", "-"),
                _or_dash(cmp.get("first_frame")),
                _or_dash(cmp.get("first_codebook")),
                _seconds(cmp.get("first_diverging_s")),
                *metric_cells(cmp, bool(cmp)),
                Link("audio and plots", f"#{anchors[id(case)]}") if id(case) in anchors else "",
            ]
        )
        classes.append(case["verdict"])
    headers = ["status", "scenario", "run", "request", "seed source", "attribution", "frame", "codebook", "second"]
    table = Table([*headers, *metric_headers(), "pair"], rows, classes, sortable=True)
    kinds = ("pass", "fail", "unseeded", SAME_SPEECH)
    per_scenario = Table(
        ["scenario", "pass", "fail", "unseeded", "same speech"],
        [[name, *(c.get(k, 0) for k in kinds)] for name, c in s["scenarios"].items()],
    )
    causes = dict(s.get("causes") or {})
    if s.get("unseeded"):
        causes["unseeded (not a failure)"] = s["unseeded"]
    per_cause = Table(["attribution", "comparisons"], [[k, v] for k, v in causes.items()] or [["none", 0]])
    sections = [
        ("Environment", [Table(["field", "value"], [[k, str(v)] for k, v in env.items()])]),
        ("Counts", [per_scenario, per_cause]),
    ]
    if doc.get("server"):
        sections.append((f"Server {doc['server']['url']}", server_blocks(doc["server"])))
    if doc.get("golden"):
        sections.append((f"Golden baseline {doc['golden'].get('path', '')}", _drift(doc["golden"])))
    questions = doc.get("questions") or {}
    facts = [
        *((name, questions[key]["line"]) for key, name in QUESTIONS.items() if key in questions),
        ("requests", f"{s['requests']} ({options.get('requests', '-')})"),
        ("comparisons", str(s["cases"])),
        ("server", env["server"]) if "server" in env else ("torch / device / dtype / threads", _platform(env)),
    ]
    answers = "".join(f"{name}: {questions[key]['verdict']}. " for key, name in QUESTIONS.items() if key in questions)
    same = f", {s['same_speech']} the same speech only" if s.get("same_speech") else ""
    headline = (
        f"{answers}{s['failures']} violation(s), {s['unseeded']} unseeded difference(s){same} in {s['cases']} "
        f"comparisons of {s['requests']} requests, level {level}, {s['elapsed_s']:.1f} s."
    )
    pairs = [_pair(n, c) for n, c in enumerate(diverging, start=1)]
    notes = [w["message"] for w in doc.get("warnings") or []]
    if s.get("incomplete"):
        headline = f"{s['incomplete']['said']}. What it compared before: {headline}"
    body = {"headline": headline, "sections": sections, "comparisons": table, "pairs": pairs, "notes": notes}
    body["matrix"] = _matrix(doc, cases, anchors, level)
    body["pairs_note"] = LOGITS_NOTE if any(p.logits for p in pairs) else ""
    return verdict_view(doc, "moss audit-determinism", outcome(s), level, facts, options.get("command"), **body)


def _platform(env: dict) -> str:
    keys = ("torch_version", "device", "dtype", "threads")
    return " / ".join(str(env.get(k, "?")) for k in keys)
