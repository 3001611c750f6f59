"""`moss diff A B`: two runs of `moss synth` (or golden files) compared id by id, with the likely
cause of each difference, the same report formats as the audit, and exit codes 0 / 1 / 2."""

import csv
import json
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import soundfile as sf
from cli_runs import assert_tables_whole, flat, moss, tables_at, write_rows  # tests/ is on sys.path
from page import is_png, parse_page

from moss_cli.io.audio import pcm_sha256

ROWS = [
    {"id": "alpha", "text": "The first sentence.", "seed": 1, "max_new_frames": 10},
    {"id": "beta", "text": "A second sentence, a little longer.", "seed": 2, "max_new_frames": 10},
    {"id": "gamma", "text": "Third.", "seed": 3, "max_new_frames": 10},
]


def _synth(base: Path, name: str, rows) -> Path:
    requests = write_rows(base / f"{name}.jsonl", rows)
    result = moss("synth", requests, "--out", base / name)
    assert result.exit_code == 0, result.output
    return base / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Two runs of the same requests, and one where beta's seed is 5 instead of 2."""
    base = tmp_path_factory.mktemp("runs")
    reseeded = [{**row, "seed": 5} if row["id"] == "beta" else row for row in ROWS]
    return {
        "a": _synth(base, "a", ROWS),
        "again": _synth(base, "again", ROWS),
        "reseeded": _synth(base, "reseeded", reseeded),
    }


def _copy(run: Path, tmp_path: Path, name: str) -> Path:
    return Path(shutil.copytree(run, tmp_path / name))


def _edit_manifest(run: Path, edit) -> None:
    path = run / "manifest.csv"
    with path.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    rows = [r for r in (edit(dict(row)) for row in rows) if r is not None]
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def _cases(path: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(path.read_text())["cases"]}


def test_two_runs_of_the_same_requests_are_identical_and_no_audio_is_decoded(runs, tmp_path):
    result = moss("diff", runs["a"], runs["again"], "--json", tmp_path / "d.json")
    assert result.exit_code == 0, result.output
    assert "IDENTICAL" in result.output
    cases = _cases(tmp_path / "d.json")
    assert {c["status"] for c in cases.values()} == {"identical"} and len(cases) == 3
    assert not any(c["audio_compared"] for c in cases.values())  # equal hashes: nothing decoded


def test_one_changed_seed_exits_1_and_names_the_seed_as_the_likely_cause(runs, tmp_path):
    with tables_at(80) as drawn:
        result = moss("diff", runs["a"], runs["reseeded"], "--json", tmp_path / "d.json", "--junit", tmp_path / "d.xml")
    assert result.exit_code == 1, result.output
    assert_tables_whole(drawn, 80)
    assert "beta: seed 2 -> 5" in flat(result.output)
    cases = _cases(tmp_path / "d.json")
    beta = cases["beta"]
    assert beta["status"] == "differs" and beta["cause"] == "seed" and beta["detail"] == "seed 2 -> 5"
    assert beta["audio_compared"] and beta["snr_db"] < 20 and beta["max_abs_diff"] > 0
    assert cases["alpha"]["status"] == cases["gamma"]["status"] == "identical"
    failures = list(ET.parse(tmp_path / "d.xml").getroot().iter("failure"))
    assert [f.get("type") for f in failures] == ["seed"] and "seed 2 -> 5" in failures[0].get("message")


def test_a_missing_directory_or_a_directory_without_manifest_exits_2(runs, tmp_path):
    missing = moss("diff", runs["a"], tmp_path / "nowhere")
    assert missing.exit_code == 2 and "[B]: does not exist" in flat(missing.output)
    (tmp_path / "empty").mkdir()
    empty = moss("diff", tmp_path / "empty", runs["a"])
    assert empty.exit_code == 2 and "[A]: no manifest.csv" in flat(empty.output)
    assert "Traceback" not in missing.output + empty.output


def test_a_bad_manifest_exits_2_listing_every_problem_with_its_line(runs, tmp_path):
    bad = _copy(runs["a"], tmp_path, "bad")
    _edit_manifest(bad, lambda r: {**r, "pcm_sha256": "nope"} if r["id"] == "beta" else {**r, "id": "alpha"})
    result = moss("diff", runs["a"], bad)
    out = flat(result.output)
    assert result.exit_code == 2, result.output
    assert "manifest.csv:3 [pcm_sha256]: not a sha256" in out and "manifest.csv:4 [id]: duplicate id 'alpha'" in out
    _edit_manifest(bad, lambda r: {k: v for k, v in r.items() if k != "codes_sha256"})
    assert "missing column(s) codes_sha256" in flat(moss("diff", runs["a"], bad).output)


def _requantise(run: Path, key: str, delta: int, update_manifest: bool) -> None:
    """Change one sample of `key`'s audio by `delta` steps (a codec rounding differently would)."""
    path = run / f"{key}.wav"
    data, rate = sf.read(str(path), dtype="int16", always_2d=True)
    data[len(data) // 2, 0] += delta
    sf.write(str(path), data, rate, subtype="PCM_16")
    if update_manifest:
        _edit_manifest(run, lambda r: {**r, "pcm_sha256": pcm_sha256(data)} if r["id"] == key else r)


def test_same_codes_with_slightly_other_pcm_fail_bitwise_and_pass_the_waveform_level(runs, tmp_path):
    other = _copy(runs["a"], tmp_path, "other")
    _requantise(other, "gamma", 3, update_manifest=True)
    bitwise = moss("diff", runs["a"], other, "--json", tmp_path / "b.json")
    assert bitwise.exit_code == 1
    gamma = _cases(tmp_path / "b.json")["gamma"]
    assert gamma["cause"] == "codec-numeric" and gamma["codes_equal"] and not gamma["pcm_equal"]
    assert 60 < gamma["snr_db"] and gamma["max_abs_diff"] == pytest.approx(3 / 32767)
    assert moss("diff", runs["a"], other, "--level", "waveform").exit_code == 0
    assert moss("diff", runs["a"], other, "--level", "waveform", "--min-snr-db", "200").exit_code == 1
    assert moss("diff", runs["a"], other, "--level", "loose").exit_code == 2


def test_runs_from_two_machines_name_the_environment_fields_that_differ(runs, tmp_path):
    recorded = json.loads((runs["a"] / ".moss" / "environment.json").read_text())
    assert {"device", "dtype", "threads", "torch_version", "talker_checkpoint"} <= set(recorded)
    elsewhere = _copy(runs["a"], tmp_path, "elsewhere")  # as if synthesised on another machine
    other = {**recorded, "threads": 8, "torch_version": "9.9"}
    (elsewhere / ".moss" / "environment.json").write_text(json.dumps(other))
    _requantise(elsewhere, "gamma", 3, update_manifest=True)
    result = moss("diff", runs["a"], elsewhere, "--json", tmp_path / "e.json")
    assert result.exit_code == 1
    report = json.loads((tmp_path / "e.json").read_text())
    assert set(report["environment_changes"]) == {"threads", "torch_version"}
    gamma = _cases(tmp_path / "e.json")["gamma"]
    assert gamma["cause"] == "environment" and "threads" in gamma["detail"] and "torch_version" in gamma["detail"]


def test_against_a_legacy_global_rng_run_the_cause_is_that_setting_not_the_seed(tmp_path):
    """The legacy mode changes how every request samples and records the run's one global stream
    as each seed's source: the setting is each id's cause, before a seed whose value it leaves alone
    (an unseeded request's deploy seed 42 -> 42) or changes (its own seed 1 -> the global 42)."""
    rows = [
        {"id": "free", "text": "No seed of its own: the deploy seed.", "max_new_frames": 10},
        {"id": "own", "text": "A seed of its own.", "seed": 1, "max_new_frames": 10},
    ]
    requests = write_rows(tmp_path / "r.jsonl", rows)
    for name, extra in (("fixed", ()), ("legacy", ("--legacy-global-rng",))):
        done = moss("synth", requests, "--out", tmp_path / name, *extra)
        assert done.exit_code == 0, done.output
    result = moss("diff", tmp_path / "fixed", tmp_path / "legacy", "--json", tmp_path / "d.json")
    assert result.exit_code == 1, result.output
    cases = _cases(tmp_path / "d.json")
    differing = {key: case for key, case in cases.items() if case["status"] == "differs"}
    assert differing, cases  # the global stream gives at least one request other audio
    for key, case in differing.items():
        assert case["cause"] == "settings", case
        assert case["detail"].startswith("legacy_global_rng False -> True; seed "), case
    assert "seed 42 -> 42 (global)" in cases["free"]["detail"] or cases["free"]["status"] == "identical"
    # A side whose environment is not recorded: the seed sources still say which mode each run used.
    unrecorded = _copy(tmp_path / "legacy", tmp_path, "unrecorded")
    (unrecorded / ".moss" / "environment.json").unlink()
    moss("diff", tmp_path / "fixed", unrecorded, "--json", tmp_path / "u.json")
    for key, case in _cases(tmp_path / "u.json").items():
        if key in differing:
            assert case["cause"] == "settings" and "--legacy-global-rng on one side only" in case["detail"], case


def test_two_runs_of_an_unseeded_request_that_differ_are_not_reproducible_unless_allowed(tmp_path):
    """No seed of its own and none in the deploy file: each run draws from the global RNG, so the
    two runs differ and the id fails, as the audit fails such a request; --allow-unseeded reports it."""
    deploy = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_tiny_unseeded.yaml"
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "free", "text": "No seed anywhere.", "max_new_frames": 10}])
    for name in ("one", "two"):
        done = moss("synth", requests, "--out", tmp_path / name, "--deploy", deploy)
        assert done.exit_code == 0, done.output
    failed = moss("diff", tmp_path / "one", tmp_path / "two", "--json", tmp_path / "d.json")
    assert failed.exit_code == 1, failed.output
    free = _cases(tmp_path / "d.json")["free"]
    assert (free["verdict"], free["cause"]) == ("fail", "unseeded-not-reproducible")
    assert free["detail"].startswith("not reproducible: no seed on either side") and "stage 0 none" in free["detail"]
    allowed = moss("diff", tmp_path / "one", tmp_path / "two", "--allow-unseeded", "--json", tmp_path / "a.json")
    assert allowed.exit_code == 0, allowed.output
    assert _cases(tmp_path / "a.json")["free"]["verdict"] == "unseeded"


def test_a_file_changed_after_synthesis_and_ids_on_one_side_only_fail(runs, tmp_path):
    touched = _copy(runs["a"], tmp_path, "touched")
    _requantise(touched, "alpha", 1, update_manifest=False)
    _edit_manifest(touched, lambda r: None if r["id"] == "gamma" else r)
    result = moss("diff", runs["a"], touched, "--json", tmp_path / "d.json", "--markdown", tmp_path / "d.md")
    assert result.exit_code == 1
    cases = _cases(tmp_path / "d.json")
    assert cases["alpha"]["cause"] == "file-changed" and cases["alpha"]["detail"] == (
        "B: alpha.wav no longer holds the audio its manifest lists; both manifests list the same audio"
    )
    assert cases["gamma"]["status"] == "only-a" and cases["beta"]["status"] == "identical"
    assert "| gamma | only-a | missing |" in (tmp_path / "d.md").read_text()


def test_a_missing_audio_file_is_named_as_such_not_as_the_codecs_numbers(runs, tmp_path):
    gone = _copy(runs["a"], tmp_path, "gone")
    (gone / "beta.wav").unlink()
    result = moss("diff", runs["a"], gone, "--json", tmp_path / "d.json")
    assert result.exit_code == 1
    beta = _cases(tmp_path / "d.json")["beta"]
    assert beta["cause"] == "file-changed" and beta["detail"] == (
        "B: audio file beta.wav is missing or unreadable; both manifests list the same audio"
    )
    assert "codec" not in flat(result.output) and "missing or unreadable" in flat(result.output)


def test_a_golden_file_compares_with_a_run_of_the_same_requests(runs, tmp_path):
    golden = tmp_path / "golden.json"
    saved = moss("audit-determinism", runs["a"].parent / "a.jsonl", "--scenarios", "repeat", "--save-golden", golden)
    assert saved.exit_code == 0, saved.output
    assert moss("diff", golden, runs["a"]).exit_code == 0  # the audit's reference is what synth wrote
    result = moss("diff", golden, runs["reseeded"], "--json", tmp_path / "d.json")
    assert result.exit_code == 1
    assert _cases(tmp_path / "d.json")["beta"]["detail"] == "seed 2 -> 5"
    not_golden = tmp_path / "x.json"
    not_golden.write_text("{}")
    assert "[A]: not a golden file" in flat(moss("diff", not_golden, runs["a"]).output)


def test_report_dir_holds_the_page_the_clips_and_plots_of_each_differing_id_with_ids_escaped(runs, tmp_path):
    odd = '<i>beta</i> & "co"'
    sides = [_copy(runs[name], tmp_path, name) for name in ("a", "reseeded")]
    for side in sides:
        _edit_manifest(side, lambda r: {**r, "id": odd, "file": "beta.wav"} if r["id"] == "beta" else r)
    elsewhere = tmp_path / "d.json", tmp_path / "j.xml"  # written there too, not instead
    result = moss("diff", *sides, "--report-dir", tmp_path / "rep", "--json", elsewhere[0], "--junit", elsewhere[1])
    assert result.exit_code == 1, result.output
    rep = tmp_path / "rep"
    assert {"index.html", "diff.json", "junit.xml", "summary.md"} <= {p.name for p in rep.iterdir()}
    assert (rep / "diff.json").read_text() == elsewhere[0].read_text()
    assert (rep / "junit.xml").read_text() == elsewhere[1].read_text()
    page = parse_page(rep / "index.html")
    assert odd in page.words and not page.all("i")
    clips, plots = page.files("audio"), page.files("img")
    assert len(clips) == 2 and all(sf.info(str(rep / c)).frames > 0 for c in clips)
    assert len(plots) == 2 and all(is_png(rep / p) for p in plots)
    assert "Plots drawn for 1 of 1 diverging pair(s)." in page.words and "seed 2 -> 5" in page.words


def test_runs_through_a_server_without_codes_hashes_are_compared_by_their_audio(runs, tmp_path):
    """`moss synth --server` against a server that sends no codes hash leaves the column empty."""
    a, b = _copy(runs["a"], tmp_path, "a"), _copy(runs["reseeded"], tmp_path, "b")
    for run in (a, b):
        _edit_manifest(run, lambda r: {**r, "codes_sha256": ""})
    same = moss("diff", a, a, "--json", tmp_path / "same.json")
    assert same.exit_code == 0, same.output
    assert {c["codes_equal"] for c in _cases(tmp_path / "same.json").values()} == {None}
    differ = moss("diff", a, b, "--json", tmp_path / "d.json")
    assert differ.exit_code == 1, differ.output
    cases = _cases(tmp_path / "d.json")
    assert cases["beta"]["status"] == "differs" and cases["beta"]["cause"] == "seed"
    assert cases["alpha"]["status"] == "identical"


def test_runs_without_codes_hashes_pass_the_waveform_level_by_their_snr_as_the_audit_judges_them(runs, tmp_path):
    """Unknown codes: the SNR alone decides at --level waveform (measures.passes, the audit's rule too)."""
    a, b = _copy(runs["a"], tmp_path, "a"), _copy(runs["a"], tmp_path, "b")
    for run in (a, b):
        _edit_manifest(run, lambda r: {**r, "codes_sha256": ""})
    _requantise(b, "gamma", 3, update_manifest=True)
    assert moss("diff", a, b).exit_code == 1
    waveform = moss("diff", a, b, "--level", "waveform", "--json", tmp_path / "w.json")
    assert waveform.exit_code == 0, waveform.output
    gamma = _cases(tmp_path / "w.json")["gamma"]
    assert gamma["status"] == "within-snr" and gamma["codes_equal"] is None and 60 < gamma["snr_db"]
    assert moss("diff", a, b, "--level", "waveform", "--min-snr-db", "200").exit_code == 1
