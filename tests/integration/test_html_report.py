"""The audit's HTML page (index.html in --report-dir): well-formed, every diverging pair with its two
clips and its plots, no plots for a passing audit, top logits for `numeric`, golden drift next to the
environment, and a report folder that is replaced whole or not at all."""

import json
import shutil
from pathlib import Path

import pytest
import torch
from cli_runs import flat, moss_audit, write_rows  # tests/ is on sys.path
from page import is_png, parse_page

import moss_cli.audit.runner as audit_runner
import moss_cli.report.page as report_page
from moss_cli.audit.page import audit_view, pair_files
from moss_cli.audit.report import write_reports
from moss_cli.audit.runner import AuditOptions, run_audit
from moss_cli.pipeline import SynthOptions
from moss_cli.report.page import write_page

ROWS = [
    {"id": "first", "text": "The first request of the page.", "seed": 11, "max_new_frames": 10},
    {"id": "second", "text": "A second one, somewhat longer.", "seed": 12, "max_new_frames": 10},
    {"id": "third", "text": "Third.", "seed": 13, "max_new_frames": 10},
]


@pytest.fixture(scope="module")
def failing(tmp_path_factory) -> Path:
    """The report of a failing --legacy-global-rng audit; the request file lies in a folder whose
    name a page must escape."""
    base = tmp_path_factory.mktemp("html")
    requests = write_rows(base / "a<b>&'c" / "r.jsonl", ROWS)
    result = moss_audit(requests, "--legacy-global-rng", "--scenarios", "repeat,batched", "--report-dir", base / "rep")
    assert result.exit_code == 1, result.output
    return base / "rep"


def test_a_failing_audit_page_is_well_formed_with_both_clips_and_plots_of_every_diverging_pair(failing):
    page = parse_page(failing / "index.html")
    cases = json.loads((failing / "audit.json").read_text())["cases"]
    diverging = [c for c in cases if c["verdict"] != "pass"]
    assert diverging and any(c["verdict"] == "pass" for c in cases)  # repeat passes, batched fails

    assert len([a for a in page.all("article") if "pair" in a.get("class", "")]) == len(diverging)
    clips = page.files("audio")
    assert sorted(clips) == sorted(p for c in diverging for _, p in pair_files(c["scenario"], c["run"], c["request"]))
    assert all((failing / clip).stat().st_size > 44 for clip in clips)  # WAV header plus samples
    plots = page.files("img")
    assert len(plots) == 2 * len(diverging) and all(is_png(failing / p) for p in plots)
    assert f"Plots drawn for {len(diverging)} of {len(diverging)} diverging pair(s)." in page.words

    rows = [a.get("class") for a in page.all("tr") if a.get("class")]
    assert len(rows) == len(cases) and rows[: len(diverging)] == ["fail"] * len(diverging)  # failures first
    command = json.loads((failing / "audit.json").read_text())["options"]["command"]  # the same on the page
    assert command.startswith("moss audit-determinism ") and command in page.words
    assert "--scenarios repeat,batched" in command and "--legacy-global-rng" in command and "--report-dir" in command
    assert "rng-coupling" in page.words and "torch_version" in page.words and "talker_checkpoint" in page.words


def _matrix(html: str) -> list[tuple[str, str, str]]:
    """The matrix's cells as drawn: (status, link, text), row by row."""
    import re

    table = html[html.index('<table class="matrix">') : html.index("</table>", html.index('<table class="matrix">'))]
    return re.findall(r'<td class="m ([^"]+)"[^>]*><a href="([^"]+)">([^<]+)</a></td>', table)


def test_the_page_leads_with_the_request_by_scenario_matrix_then_the_first_divergence(failing):
    html = (failing / "index.html").read_text()
    page = parse_page(failing / "index.html")
    doc = json.loads((failing / "audit.json").read_text())
    assert html.index('id="matrix"') < html.index('id="first"') < html.index('id="summary"')
    cells = _matrix(html)
    requests, scenarios = [r["id"] for r in ROWS], list(doc["summary"]["scenarios"])
    assert scenarios == ["repeat", "batched"] and len(cells) == len(requests) * len(scenarios)
    for (status, link, text), (request, scenario) in zip(cells, [(r, s) for r in requests for s in scenarios]):
        mine = [c for c in doc["cases"] if (c["request"], c["scenario"]) == (request, scenario)]
        assert status == ("fail" if any(c["verdict"] == "fail" for c in mine) else "pass")
        if status == "fail":  # named by its cause, linking to its pair, which shows it
            assert text == mine[0]["attribution"]["cause"] and link.startswith("#pair-")
            assert any(a.get("id") == link[1:] for a in page.all("article"))
    legend = [a.get("class") for a in page.all("span") if a.get("class", "").startswith("m ")]
    assert legend == ["m fail", "m pass"]  # the statuses shown, failures first
    # The first pair sits right below the matrix and is not repeated in the list of pairs.
    assert html.index('id="pair-1"') < html.index('id="summary"')
    assert len([a for a in page.all("article") if a.get("id") == "pair-1"]) == 1
    # What the logits tables show is said once, not once per pair.
    assert page.words.count("largest logits in each composition") <= 1


def test_a_verdict_the_page_does_not_know_gets_a_colour_and_its_place_in_the_legend(failing, tmp_path):
    """The matrix's colours come from each comparison's verdict, whatever its name: a failure, a pass,
    or any other verdict (a difference that is not a failure) between them."""
    folder = Path(shutil.copytree(failing, tmp_path / "copy"))
    shutil.rmtree(folder / "plots")
    doc = json.loads((folder / "audit.json").read_text())
    novel = next(c for c in doc["cases"] if c["scenario"] == "repeat")
    novel["verdict"] = "varies-somehow"
    novel["attribution"] = {"cause": "varies-somehow", "detail": "a difference named later"}
    write_page(folder, audit_view(doc), max_plots=0)
    html = (folder / "index.html").read_text()
    at = [r["id"] for r in ROWS].index(novel["request"]) * 2  # its row's first column: repeat
    status, link, text = _matrix(html)[at]
    assert status == text == "varies-somehow" and link.startswith("#pair-")  # a pair like any difference
    page = parse_page(folder / "index.html")
    legend = [a.get("class") for a in page.all("span") if a.get("class", "").startswith("m ")]
    assert legend == ["m fail", "m varies-somehow", "m pass"]
    assert "varies-somehow differs, not a failure" in page.words


def test_ids_and_paths_from_users_are_escaped(failing):
    page = parse_page(failing / "index.html")
    assert "a<b>&'c" in page.words  # shown as text ...
    assert not page.all("b")  # ... never as markup


def test_a_passing_audit_draws_no_plots(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", ROWS[:2])
    result = moss_audit(requests, "--scenarios", "repeat,batched", "--report-dir", tmp_path / "rep")
    assert result.exit_code == 0, result.output
    page = parse_page(tmp_path / "rep" / "index.html")
    assert not page.all("img") and not page.all("audio")
    assert not (tmp_path / "rep" / "plots").exists() and not (tmp_path / "rep" / "diverging").exists()
    assert "No diverging pairs: no plots drawn." in page.words
    assert [a.get("class") for a in page.all("tr") if a.get("class")] == ["pass"] * 4


def test_past_the_plot_limit_pairs_keep_their_clips_and_the_page_says_how_many_were_drawn(failing, tmp_path):
    folder = Path(shutil.copytree(failing, tmp_path / "copy"))
    shutil.rmtree(folder / "plots")
    doc = json.loads((folder / "audit.json").read_text())
    view = audit_view(doc)
    write_page(folder, view, max_plots=1)
    page = parse_page(folder / "index.html")
    assert len(page.files("img")) == 2 and len(page.files("audio")) == 2 * len(view.pairs) > 2
    assert f"Plots drawn for 1 of {len(view.pairs)} diverging pair(s) (at most" in page.words


def _nudge_batched_rows(key, frame, codebook, logits, batch, generator):
    # Batched rows get slightly other logits (a numeric batch effect); alone they are untouched.
    if batch > 1:
        return logits + 0.3 * torch.sin(torch.arange(logits.shape[-1], dtype=logits.dtype) * 7.0 + frame)
    return None


def test_numeric_attributions_show_the_top_logits_of_both_compositions(tmp_path):
    options = AuditOptions(
        requests=write_rows(tmp_path / "r.jsonl", ROWS),
        scenarios=("batched",),
        synth=SynthOptions(device="cpu"),
        perturb=_nudge_batched_rows,
    )
    result = run_audit(options)
    numeric = [c for c in result.cases if c.failed and c.attribution.cause == "numeric"]
    assert numeric
    write_reports(result, None, report_dir=tmp_path / "rep")
    for case in json.loads((tmp_path / "rep" / "audit.json").read_text())["cases"]:
        top = (case["attribution"] or {}).get("top_logits")
        if case["verdict"] == "fail" and case["attribution"]["cause"] == "numeric":
            for side in ("reference", "other"):
                values = [v for _, v in top[side]]
                assert 2 <= len(values) <= 8 and values == sorted(values, reverse=True)
            assert top["reference"] != top["other"]  # numeric: the logits differ
    page = parse_page(tmp_path / "rep" / "index.html")
    assert page.words.count("Top logits at the diverging draw") == len(numeric)
    first = numeric[0].attribution.top_logits
    assert f"{first['reference'][0][1]:.6g}" in page.words and f"{first['other'][0][1]:.6g}" in page.words


def test_golden_drift_shows_the_changed_requests_next_to_the_changed_environment(tmp_path):
    golden = tmp_path / "golden.json"
    before = write_rows(tmp_path / "before.jsonl", ROWS[:2])
    assert moss_audit(before, "--scenarios", "repeat", "--save-golden", golden).exit_code == 0
    recorded = json.loads(golden.read_text())
    recorded["environment"]["threads"] = 99  # as if the baseline came from a bigger machine
    golden.write_text(json.dumps(recorded))
    after = write_rows(tmp_path / "after.jsonl", [{**ROWS[0], "seed": 7}, ROWS[1]])
    result = moss_audit(after, "--scenarios", "repeat", "--golden", golden, "--report-dir", tmp_path / "rep")
    assert result.exit_code == 1, result.output
    page = parse_page(tmp_path / "rep" / "index.html")
    tables = page.words.split("Golden baseline")[1:]
    assert tables and "request changed" in tables[0] and "environment field changed" in tables[0]
    assert "first codes" in page.words and "seed 11 -> 7" in page.words and "threads 99 1" in page.words
    md = (tmp_path / "rep" / "summary.md").read_text()
    assert "| `first` | codes changed" in md and "seed 11 -> 7 | `threads`: `99` → `1` |" in md


def test_a_report_folder_is_replaced_whole_and_a_failed_write_leaves_the_old_one(failing, tmp_path, monkeypatch):
    rep = Path(shutil.copytree(failing, tmp_path / "rep"))
    requests = write_rows(tmp_path / "r.jsonl", ROWS[:1])

    def broken(folder, view, max_plots=20):
        raise OSError("disk full")

    monkeypatch.setattr(report_page, "write_page", broken)
    assert moss_audit(requests, "--scenarios", "repeat", "--report-dir", rep).exit_code == 2
    assert (rep / "diverging").is_dir() and (rep / "index.html").is_file()  # the old report, untouched
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl", "rep"]  # no half-built folder left
    monkeypatch.undo()

    assert moss_audit(requests, "--scenarios", "repeat", "--report-dir", rep).exit_code == 0
    assert not (rep / "diverging").exists() and not (rep / "plots").exists()  # nothing stale from before
    assert parse_page(rep / "index.html").words.count("No diverging pairs") == 2


def test_a_report_dir_holding_other_files_is_refused_before_the_audit(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_runner, "run_audit", lambda options: pytest.fail("the audit ran"))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    result = moss_audit("--report-dir", tmp_path / "mine")
    out = flat(result.output)
    assert result.exit_code == 2 and "[--report-dir]" in out and "notes.txt" in out
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"


def test_a_pair_whose_plots_fail_is_said_so_and_the_page_is_still_written(failing, tmp_path):
    folder = Path(shutil.copytree(failing, tmp_path / "copy"))
    shutil.rmtree(folder / "plots")
    view = audit_view(json.loads((folder / "audit.json").read_text()))
    (folder / view.pairs[0].audio[1][1]).write_bytes(b"RIFF, but not a WAV file")
    write_page(folder, view)
    page = parse_page(folder / "index.html")
    assert "its plots could not be drawn" in page.words
    assert len(page.files("img")) == 2 * (len(view.pairs) - 1)
