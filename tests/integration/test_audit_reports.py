"""What the audit reports say: mix-up warnings, output paths checked up front, golden drift and
its cause, numbers rounded for people, JUnit times."""

import io
import json
import re
import shutil
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import torch
from cli_runs import assert_tables_whole, flat, moss_audit, tables_at, write_rows  # tests/ is on sys.path
from rich.console import Console

import moss_cli.audit.runner as audit_runner
from moss_cli.audit.attribution import codec_numeric
from moss_cli.audit.compare import Comparison
from moss_cli.audit.mixups import MixUpLog, request_content
from moss_cli.audit.report import junit_xml, markdown, render, to_json
from moss_cli.audit.runner import AuditOptions, AuditResult
from moss_cli.audit.verdicts import Case
from moss_cli.config.requests import Request
from moss_cli.engine.frame import STOP_HEAD
from moss_cli.io.outcome import Outcome
from moss_cli.model.talker import STOP
from moss_cli.pipeline import Synthesizer, SynthOptions

RECIPES = Path(__file__).resolve().parents[2] / "recipes"


# --- mix-up warnings ---------------------------------------------------------------------------

MIXED = {"a", "b"}


def _force_same_codes(key, frame, codebook, logits, batch, generator):
    # Requests a and b get the same, certain choice at every draw: identical codes although
    # their texts and seeds differ, as if one request's codes had been handed to the other.
    if key not in MIXED:
        return None
    forced = torch.full_like(logits, -1e4)
    forced[1 - STOP if codebook == STOP_HEAD else (frame + codebook) % logits.shape[-1]] = 1e4
    return forced


def test_different_requests_with_identical_codes_warn_in_every_report_but_twins_do_not(tmp_path, monkeypatch):
    requests = write_rows(
        tmp_path / "r.jsonl",
        [
            {"id": "a", "text": "The first request.", "seed": 1, "max_new_frames": 8},
            {"id": "b", "text": "A different second request.", "seed": 2, "max_new_frames": 8},
            {"id": "twin-1", "text": "Deliberately the same.", "seed": 3, "max_new_frames": 8},
            {"id": "twin-2", "text": "Deliberately the same.", "seed": 3, "max_new_frames": 8},
        ],
    )
    real_run_audit = audit_runner.run_audit

    def perturbed(options):
        options.perturb = _force_same_codes
        return real_run_audit(options)

    monkeypatch.setattr(audit_runner, "run_audit", perturbed)
    result = moss_audit(
        requests,
        "--scenarios",
        "repeat,batched",
        "--json",
        tmp_path / "a.json",
        "--junit",
        tmp_path / "a.xml",
        "--markdown",
        tmp_path / "a.md",
    )
    assert result.exit_code == 0, result.output  # a warning, not a failure

    report = json.loads((tmp_path / "a.json").read_text())
    assert report["reference"]["twin-1"]["pcm_sha256"] == report["reference"]["twin-2"]["pcm_sha256"]
    warnings = report["warnings"]
    assert [w["requests"] for w in warnings] == [["a", "b"]]
    assert {"text", "seed"} <= set(warnings[0]["differs"])
    assert {"reference/alone", "repeat/repeat"} <= set(warnings[0]["runs"])
    assert report["summary"]["warnings"] == 1 and report["summary"]["passed"]

    terminal = flat(result.output)
    assert "warning: requests 'a' and 'b' differ" in terminal and "twin-1" not in terminal

    suites = ET.parse(tmp_path / "a.xml").getroot()
    assert suites.get("failures") == "0" and not list(suites.iter("failure"))
    errs = [e.text for e in suites.iter("system-err")]
    assert len(errs) == 2 and all("requests 'a' and 'b'" in e for e in errs)  # one per scenario suite

    md = (tmp_path / "a.md").read_text()
    assert "Warnings (1)" in md and "requests 'a' and 'b'" in md and "twin-1" not in md


def _mixups(prepared, seeds_used=True):
    codes = torch.arange(12).reshape(2, 6)  # the same codes for every request
    outputs = {
        p.request.id: Outcome(
            p.request.id,
            np.zeros((0, 1), "<i2"),
            24_000,
            "",
            "request",
            frames=2,
            codes=codes,
            content=request_content(p, seeds_used),
        )
        for p in prepared
    }
    log = MixUpLog(list(outputs))
    log.add("batched", "max-batch-4", outputs)
    return [(m.requests, m.differs) for m in log.found]


def test_requests_differing_only_in_a_seed_the_engine_ignores_are_twins_not_a_mixup():
    synth = Synthesizer(SynthOptions(device="cpu"))
    greedy = {"audio_temperature": 0.0}
    greedy_pair = synth.prepare(
        [
            Request("g1", "Same text.", 1, seed=1, sampling=greedy),
            Request("g2", "Same text.", 2, seed=2, sampling=greedy),
        ]
    )
    sampled_pair = synth.prepare([Request("s1", "Same text.", 1, seed=1), Request("s2", "Same text.", 2, seed=2)])
    assert _mixups(greedy_pair) == []  # greedy decoding ignores the seed
    assert _mixups(sampled_pair, seeds_used=False) == []  # so does the legacy global RNG
    assert _mixups(sampled_pair) == [(["s1", "s2"], ["seed"])]  # sampled: another seed must change the codes


# --- output paths are checked before any work --------------------------------------------------


def _file(path: Path) -> Path:
    path.write_text("x")
    return path


def _dir(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.parametrize(
    "option, make",
    [
        ("--report-dir", lambda t: _file(t / "reports")),
        ("--json", lambda t: _dir(t / "a.json")),
        ("--junit", lambda t: _file(t / "parent") / "junit.xml"),
        ("--markdown", lambda t: _file(t / "parent") / "deeper" / "summary.md"),
        ("--save-golden", lambda t: _dir(t / "golden.json")),
        ("--json", lambda t: _file(t / "reports") / "audit.json"),
    ],
)
def test_unusable_output_paths_exit_2_naming_the_option_before_the_audit_runs(tmp_path, monkeypatch, option, make):
    def must_not_run(options):
        raise AssertionError("the audit ran before its output paths were checked")

    monkeypatch.setattr(audit_runner, "run_audit", must_not_run)
    monkeypatch.setattr(audit_runner, "AuditOptions", lambda **kw: pytest.fail("options built before the check"))
    path = make(tmp_path)
    result = moss_audit("--scenarios", "repeat", option, path)
    assert result.exit_code == 2, result.output
    out = flat(result.output)
    assert f"[{option}]" in out and str(path) in out and "Traceback" not in out


def test_report_dir_with_a_directory_where_a_report_file_goes_exits_2(tmp_path, monkeypatch):
    monkeypatch.setattr(audit_runner, "run_audit", lambda options: pytest.fail("the audit ran"))
    (tmp_path / "reports" / "junit.xml").mkdir(parents=True)
    result = moss_audit("--report-dir", tmp_path / "reports")
    assert result.exit_code == 2 and f"{tmp_path / 'reports' / 'junit.xml'} [--report-dir]" in flat(result.output)


def test_report_dir_holds_every_report_when_they_are_also_written_elsewhere(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Hello there.", "seed": 3, "max_new_frames": 4}])
    elsewhere = {"--json": tmp_path / "a.json", "--junit": tmp_path / "j.xml", "--markdown": tmp_path / "s.md"}
    options = [str(x) for pair in elsewhere.items() for x in pair]
    result = moss_audit(requests, "--scenarios", "repeat", "--report-dir", tmp_path / "rep", *options)
    assert result.exit_code == 0, result.output
    rep = tmp_path / "rep"
    assert {"audit.json", "junit.xml", "summary.md", "index.html"} <= {p.name for p in rep.iterdir()}
    for name, option in (("audit.json", "--json"), ("junit.xml", "--junit"), ("summary.md", "--markdown")):
        assert (rep / name).read_text() == elsewhere[option].read_text()


def test_missing_parent_folders_of_outputs_are_created(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Hello there.", "seed": 3, "max_new_frames": 8}])
    golden = tmp_path / "new" / "golden" / "g.json"
    junit = tmp_path / "ci" / "reports" / "junit.xml"
    result = moss_audit(requests, "--scenarios", "repeat", "--save-golden", golden, "--junit", junit)
    assert result.exit_code == 0, result.output
    assert f"golden baseline saved: {golden}" in " ".join(result.output.split())
    assert json.loads(golden.read_text())["requests"]["r"]["seed"] == 3
    suites = {suite.get("name"): suite.get("tests") for suite in ET.parse(junit).getroot()}
    assert suites == {"audit.repeat": "1", "audit.seed": "1", "audit.numerics": "0"}


# --- golden drift, said right ------------------------------------------------------------------


def test_requests_added_or_removed_since_the_baseline_are_listed_and_are_not_drift(tmp_path):
    golden = tmp_path / "golden.json"
    kept = {"id": "kept", "text": "In both.", "seed": 5, "max_new_frames": 6}
    before = write_rows(
        tmp_path / "before.jsonl", [kept, {"id": "old", "text": "Gone now.", "seed": 1, "max_new_frames": 6}]
    )
    assert moss_audit(before, "--scenarios", "repeat", "--save-golden", golden).exit_code == 0
    after = write_rows(
        tmp_path / "after.jsonl", [kept, {"id": "new", "text": "Added.", "seed": 2, "max_new_frames": 6}]
    )
    reports = ["--json", tmp_path / "d.json", "--markdown", tmp_path / "d.md", "--junit", tmp_path / "d.xml"]
    result = moss_audit(after, "--scenarios", "repeat", "--golden", golden, *reports)
    assert result.exit_code == 0, result.output  # nothing to compare is not drift
    out = flat(result.output)
    assert "no drift" in out and "1 not in the baseline: new" in out and "1 removed since the baseline: old" in out
    checked = json.loads((tmp_path / "d.json").read_text())["golden"]
    assert (checked["drifts"], checked["not_in_baseline"], checked["removed"]) == ([], ["new"], ["old"])
    assert "not in the baseline: new" in checked["summary"] and "removed since the baseline: old" in checked["summary"]
    markdown_text = (tmp_path / "d.md").read_text()
    assert "1 not in the baseline: new" in markdown_text and "1 removed since the baseline: old" in markdown_text
    suite = next(s for s in ET.parse(tmp_path / "d.xml").getroot() if s.get("name") == "audit.golden")
    assert suite.get("failures") == "0" and suite.get("skipped") == "1"


def test_golden_drift_from_a_changed_seed_names_the_seed_and_is_not_called_a_violation(tmp_path):
    golden = tmp_path / "golden.json"
    before = write_rows(
        tmp_path / "before.jsonl",
        [
            {"id": "r", "text": "Seeded text.", "seed": 42, "max_new_frames": 12},
            {"id": "same", "text": "Unchanged.", "seed": 5, "max_new_frames": 12},
        ],
    )
    saved = moss_audit(before, "--scenarios", "repeat", "--save-golden", golden)
    assert saved.exit_code == 0, saved.output

    after = write_rows(
        tmp_path / "after.jsonl",
        [
            {"id": "r", "text": "Seeded text.", "seed": 7, "max_new_frames": 12},
            {"id": "same", "text": "Unchanged.", "seed": 5, "max_new_frames": 12},
        ],
    )
    result = moss_audit(
        after,
        "--scenarios",
        "repeat",
        "--golden",
        golden,
        "--json",
        tmp_path / "d.json",
        "--markdown",
        tmp_path / "d.md",
        "--junit",
        tmp_path / "d.xml",
    )
    assert result.exit_code == 1, result.output
    out = flat(result.output)
    assert "audit found violations" not in out and "0 violation(s)" in out
    assert "FAILED (golden drift)" in out and "golden drift:" in out and "r: seed 42 -> 7" in out

    report = json.loads((tmp_path / "d.json").read_text())
    assert [(d["request"], d["cause"]) for d in report["golden"]["drifts"]] == [("r", "seed 42 -> 7")]
    assert report["golden"]["environment_changes"] == {}
    md = (tmp_path / "d.md").read_text()
    assert "FAILED (golden drift)" in md and "seed 42 -> 7" in md
    failure = next(ET.parse(tmp_path / "d.xml").getroot().iter("failure"))
    assert "seed 42 -> 7" in failure.get("message")


def test_golden_records_the_deploy_files_content_and_names_a_change_in_its_base_config(tmp_path):
    base = Path(shutil.copy(RECIPES / "moss_tts_local_tiny.yaml", tmp_path / "base.yaml"))
    base.write_text(base.read_text().replace("max_tokens: 200", "max_tokens: 12", 1))
    deploy = tmp_path / "deploy.yaml"
    deploy.write_text("base_config: base.yaml\n")
    # No max_new_frames: the base's max_tokens is the frame budget (a request's own would replace it).
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Seeded text.", "seed": 9}])
    golden = tmp_path / "golden.json"
    assert moss_audit(requests, "--deploy", deploy, "--scenarios", "repeat", "--save-golden", golden).exit_code == 0
    recorded = json.loads(golden.read_text())["environment"]["deploy_sha256"]
    assert re.fullmatch(r"[0-9a-f]{64}", recorded)

    # Same path, same top file: only the base it inherits from changes (the frame budget).
    base.write_text(base.read_text().replace("max_tokens: 12", "max_tokens: 1", 1))
    result = moss_audit(
        requests, "--deploy", deploy, "--scenarios", "repeat", "--golden", golden, "--json", tmp_path / "d.json"
    )
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "d.json").read_text())["golden"]
    assert report["drifts"] and "deploy" not in report["environment_changes"]
    assert report["environment_changes"]["deploy_sha256"]["golden"] == recorded
    assert any(c.startswith("deploy file content changed") for c in report["causes"])
    assert "deploy file content changed" in flat(result.output)


def test_an_old_golden_without_the_new_fields_still_compares_and_missing_fields_are_unknown(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Seeded text.", "seed": 42, "max_new_frames": 12}])
    golden = tmp_path / "golden.json"
    assert moss_audit(requests, "--scenarios", "repeat", "--save-golden", golden).exit_code == 0
    old = json.loads(golden.read_text())
    for key in ("deploy_sha256", "batch_invariant"):
        del old["environment"][key]
    for row in old["requests"].values():
        del row["seed"]
    golden.write_text(json.dumps(old))

    same = moss_audit(requests, "--scenarios", "repeat", "--golden", golden, "--json", tmp_path / "s.json")
    assert same.exit_code == 0, same.output
    check = json.loads((tmp_path / "s.json").read_text())["golden"]
    assert check["passed"] and check["environment_changes"] == {}
    assert {"deploy_sha256", "batch_invariant"} <= set(check["environment_unknown"])

    reseeded = write_rows(tmp_path / "r2.jsonl", [{"id": "r", "text": "Seeded text.", "seed": 7, "max_new_frames": 12}])
    drifted = moss_audit(reseeded, "--scenarios", "repeat", "--golden", golden)
    assert drifted.exit_code == 1
    out = flat(drifted.output)
    assert "cause unknown" in out and "not recorded in the golden file: deploy_sha256" in out


# --- numbers for people ------------------------------------------------------------------------


def _result_with_a_codec_difference() -> AuditResult:
    cmp = Comparison(
        codes_equal=True,
        first_frame=None,
        first_codebook=None,
        frames_reference=10,
        frames_other=10,
        duration_diff_s=0.0,
        pcm_equal=False,
        measures={
            "snr_db": 127.96399827904983,
            "log_spectral_distance": 0.012345678901234,
            "max_abs_diff": 3.0517578125e-05,
        },
    )
    case = Case("batched", "max-batch-8", "r", "request", "fail", cmp, codec_numeric(cmp), wall_s=0.25)
    env = {"device": "cpu", "dtype": "float32", "torch_version": torch.__version__}
    return AuditResult(
        AuditOptions(level="bitwise"), [case], env, {}, {}, 1.5, 24_000, ["r"], scenario_s={"batched": 0.75}
    )


def test_markdown_and_terminal_round_audio_metrics_while_json_keeps_full_precision():
    result = _result_with_a_codec_difference()
    md = markdown(result, None)
    console = Console(file=io.StringIO(), width=300)
    render(console, result, None)
    terminal = console.file.getvalue()
    for text in (md, terminal):
        assert "SNR 127.96 dB" in text and "3.05e-05" in text and "LSD 0.01 dB" in text
        assert "127.963" not in text and "0.0123" not in text
    assert to_json(result, None)["cases"][0]["comparison"]["snr_db"] == 127.96399827904983


def test_junit_times_are_the_measured_seconds_not_zero():
    root = ET.fromstring(junit_xml(_result_with_a_codec_difference(), None))
    suite = root.find("testsuite")
    assert float(root.get("time")) == 1.5 and float(suite.get("time")) == 0.75
    assert float(suite.find("testcase").get("time")) == 0.25


def test_a_real_audit_records_positive_junit_times(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Timed.", "seed": 1, "max_new_frames": 8}])
    assert moss_audit(requests, "--scenarios", "batched", "--junit", tmp_path / "j.xml").exit_code == 0
    root = ET.parse(tmp_path / "j.xml").getroot()
    cases = list(root.iter("testcase"))
    assert cases and all(float(c.get("time")) > 0 for c in cases)
    assert float(root.find("testsuite").get("time")) >= max(float(c.get("time")) for c in cases) - 1e-3


def test_terminal_tables_do_not_break_words_at_80_columns():
    from rich.console import Console

    from moss_cli.audit.report import render
    from moss_cli.audit.runner import AuditOptions, run_audit
    from moss_cli.pipeline import SynthOptions

    result = run_audit(AuditOptions(scenarios=("batched",), synth=SynthOptions(device="cpu", legacy_global_rng=True)))
    console = Console(width=80, record=True, color_system=None)
    with tables_at(80) as drawn:
        render(console, result, None)
    assert len(drawn) == 2  # the scenarios, the worst offenders
    assert_tables_whole(drawn, 80)
    text = console.export_text()
    assert max(len(line) for line in text.splitlines()) <= 80
    failed = [case for case in result.cases if case.failed]
    assert failed
    lines = text.splitlines()
    for case in failed:  # every id, run and cause appears whole on one line
        for word in (case.request, f"{case.scenario}/{case.run}", case.attribution.cause):
            assert any(word in line for line in lines), word


def test_a_golden_from_the_old_sampler_is_refused_with_a_clear_message(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "r", "text": "Seeded text.", "seed": 42, "max_new_frames": 4}])
    golden = tmp_path / "golden.json"
    assert moss_audit(requests, "--scenarios", "repeat", "--save-golden", golden).exit_code == 0
    old = json.loads(golden.read_text())
    assert old["format"] == "moss-golden/3"
    for older, why in (("moss-golden/1", "drew other codes"), ("moss-golden/2", "stage 0's sampling values")):
        golden.write_text(json.dumps({**old, "format": older}))
        result = moss_audit(requests, "--scenarios", "repeat", "--golden", golden)
        assert result.exit_code == 2
        out = flat(result.output)
        assert older in out and why in out and "--save-golden" in out and "Traceback" not in out
