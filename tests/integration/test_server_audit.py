"""`moss audit-determinism --server`: the verdicts a black-box audit reaches on servers that are
right and servers that are wrong in one known way, and reports shaped like the local audit's."""

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import pytest
import soundfile as sf
from cli_runs import AuditRun, assert_tables_whole, flat, moss, moss_audit, tables_at, write_rows
from speech_servers import Behaviour, serving, synthesize

from moss_cli.audit.scenarios import server_scenarios
from moss_cli.audit.verdicts import (
    BATCH_DEPENDENT,
    RUN_TO_RUN,
    UNSEEDED,
    UNSEEDED_NOT_REPRODUCIBLE,
    Rules,
    alone,
    judge,
)
from moss_cli.config.requests import Request
from moss_cli.io.audio import pcm_sha256
from moss_cli.io.outcome import Outcome

REQUESTS = [
    {"id": "seeded", "text": "A request with its own seed.", "seed": 5, "max_new_frames": 3},
    {"id": "unseeded", "text": "A request without a seed.", "max_new_frames": 3},
]
GREEDY = {"id": "greedy", "text": "A greedy request.", "max_new_frames": 3, "audio_temperature": 0}
RECIPES = Path(__file__).resolve().parents[2] / "recipes"


@pytest.fixture
def requests(tmp_path) -> Path:
    return write_rows(tmp_path / "requests.jsonl", REQUESTS)


def _audit(behaviour: Behaviour, requests: Path, tmp_path: Path, *extra) -> AuditRun:
    """The audit of a server that behaves as `behaviour` (tests/speech_servers.py)."""
    with serving(behaviour) as url:
        return moss_audit(requests, *extra, server=url, stagger_ms=20, report=tmp_path / "audit.json")


def _verdicts(report: dict) -> dict[str, str]:
    return {key: v["verdict"] for key, v in report["server"]["requests"].items()}


def test_a_server_that_ignores_the_seed_is_reported_seed_ignored(requests, tmp_path):
    with tables_at(80) as drawn:
        code, report, output = _audit(Behaviour(seeds="ignore"), requests, tmp_path)
    assert code == 1, output
    assert len(drawn) == 5  # scenarios, worst offenders, and the server's paths, requests and runs
    assert_tables_whole(drawn, 80)
    # Seed 5 and seed 6 give the same audio; so do no seed and an explicit one.
    assert _verdicts(report) == {"seeded": "seed-ignored", "unseeded": "seed-ignored"}
    failed = {(c["request"], c["run"]) for c in report["cases"] if c["verdict"] == "fail"}
    assert failed == {("seeded", "another-explicit-seed"), ("unseeded", "unseeded-sent-with-seed-1000003")}
    assert report["summary"]["causes"] == {"seed-ignored": 2}


def test_a_reproducible_server_passes_with_reports_shaped_like_the_local_audits(requests, tmp_path):
    code, report, output = _audit(Behaviour(moss_headers=True), requests, tmp_path, "--level", "bitwise")
    assert code == 0, output
    assert set(_verdicts(report).values()) == {"identical"}
    # It has no batch route and no WebSocket stream: those scenarios are skipped, and say why.
    assert set(report["summary"]["scenarios"]) == set(server_scenarios()) - {"batch", "websocket"}
    assert "has no /v1/audio/speech/stream" in report["server"]["skipped"]["websocket"]
    assert {"summary", "options", "environment", "reference", "cases", "warnings"} <= set(report)
    runs = report["server"]["runs"]
    for label in ("concurrent/concurrent-8", "seeded-neighbours/with-seeded-neighbours"):
        assert runs[label]["max_in_flight_server"] > 1 and runs[label]["max_in_flight_client"] > 1
    assert runs["reference/alone"]["max_in_flight_client"] == 1
    # The deploy seed the server reports, sent explicitly, gives the unseeded request's audio.
    probe = [c for c in report["cases"] if c["run"] == "the-deploy-seed-sent-explicitly"]
    assert [(c["request"], c["verdict"]) for c in probe] == [("unseeded", "pass")]
    assert report["server"]["codes"] == "x-moss-codes-sha256 header"
    # Without --deploy the reports say what that probe checked, and against what: not "not checked".
    deploy = report["server"]["deploy_seed"]
    assert deploy["checked"] == "reported" and deploy["seed"] == 42 and deploy["file"] is None
    said = flat(output)
    assert "Deploy seed: checked against the seed the server reports (42), not a deploy file: each of the 1 " in said
    assert "(seeds/the-deploy-seed-sent-explicitly)" in said and "Deploy seed: not checked" not in said


def test_a_server_whose_seeded_requests_vary_with_the_batch_fails_numerics_not_seeds_with_both_audio_files(
    requests, tmp_path
):
    """Seeded and unseeded requests alike differ with the batch, never alone: no seed explains it, so
    the numerics question fails (`numeric-batch-variance`) and the seed question passes."""
    scenarios = ("--scenarios", "concurrent,seeded-neighbours")  # few diverging pairs: the page plots each
    code, report, output = _audit(
        Behaviour(batch_dependent=True), requests, tmp_path, *scenarios, "--report-dir", tmp_path / "r"
    )
    assert code == 1, output
    assert _verdicts(report) == {"seeded": "numeric-batch-variance", "unseeded": "numeric-batch-variance"}
    seed, numerics = report["questions"]["seed"], report["questions"]["numerics"]
    assert (seed["verdict"], seed["passed"]) == ("pass", True)
    assert (numerics["verdict"], numerics["passed"]) == ("numeric-batch-variance", False)
    assert numerics["differ"] == ["seeded", "unseeded"] and numerics["seeded"] == ["seeded"]
    assert numerics["compositions"] == ["concurrent", "seeded-neighbours"]
    lines = flat(output)
    assert (
        lines.startswith("Seed: PASS") and "Numerics: FAIL numeric-batch-variance — 2 of 2 requests (1 seeded)" in lines
    )
    assert "VLLM_BATCH_INVARIANT=1" in lines
    failing = [c for c in report["cases"] if c["verdict"] == "fail"]
    assert {c["scenario"] for c in failing} == {"concurrent", "seeded-neighbours"}
    case = next(c for c in failing if c["scenario"] == "concurrent" and c["request"] == "seeded")
    assert case["comparison"]["first_diverging_s"] is not None and case["comparison"]["snr_db"] < 60
    folder = tmp_path / "r" / "diverging" / "concurrent"
    alone_pcm, _ = sf.read(folder / "seeded.alone.wav", dtype="int16", always_2d=True)
    assert pcm_sha256(alone_pcm) == report["reference"]["seeded"]["pcm_sha256"]  # exactly what the server sent
    assert (folder / "seeded.concurrent-8.wav").is_file()
    suites = ET.parse(tmp_path / "r" / "junit.xml").getroot()
    assert any(f.get("type") == "numeric-batch-variance" for f in suites.iter("failure"))
    by_suite = {s.get("name"): s for s in suites}
    assert by_suite["audit.seed"].get("failures") == "0" and by_suite["audit.numerics"].get("failures") == "2"
    summary_md = (tmp_path / "r" / "summary.md").read_text()
    assert "- **Seed**: PASS" in summary_md and "- **Numerics**: FAIL numeric-batch-variance" in summary_md


def test_rounding_level_differences_fail_bitwise_but_pass_the_waveform_level(requests, tmp_path):
    behaviour = Behaviour(batch_rounding=True)
    bitwise, report, _ = _audit(behaviour, requests, tmp_path, "--scenarios", "concurrent", "--level", "bitwise")
    assert bitwise == 1 and set(_verdicts(report).values()) == {"numeric-batch-variance"}
    snr = [c["comparison"]["snr_db"] for c in report["cases"] if c["scenario"] == "concurrent"]
    assert min(snr) > 60  # last-bit differences only
    waveform, report, output = _audit(behaviour, requests, tmp_path, "--scenarios", "concurrent", "--level", "waveform")
    assert waveform == 0, output
    # No codes hash from this server: the codes level cannot see past the audio, so it fails too.
    codes, _, _ = _audit(behaviour, requests, tmp_path, "--scenarios", "concurrent", "--level", "codes")
    assert codes == 1


def test_a_server_without_a_deploy_seed_is_not_reproducible_and_passes_only_with_allow_unseeded(requests, tmp_path):
    behaviour = Behaviour(seeds="no-deploy-seed", moss_headers=True)  # it says no seed reached the request
    scenarios = ("--scenarios", "repeat,concurrent")
    code, report, output = _audit(behaviour, requests, tmp_path, *scenarios, "--markdown", tmp_path / "s.md")
    assert code == 1, output
    assert _verdicts(report) == {"seeded": "identical", "unseeded": "unseeded-not-reproducible"}
    assert report["summary"]["causes"] == {"unseeded-not-reproducible": 2} and report["summary"]["unseeded"] == 0
    detail = report["server"]["requests"]["unseeded"]["detail"]
    assert detail.startswith("not reproducible: ") and "the server's deploy config gives stage 0 no seed" in detail
    assert "unseeded-not-reproducible" in (tmp_path / "s.md").read_text()
    assert "--allow-unseeded accepts them" in flat(output)
    # Accepted: today's warning, not a failure.
    code, report, output = _audit(behaviour, requests, tmp_path, *scenarios, "--allow-unseeded")
    assert code == 0, output
    assert _verdicts(report) == {"seeded": "identical", "unseeded": "unseeded"}
    assert report["summary"]["unseeded"] >= 2 and report["options"]["allow_unseeded"] is True
    strict, report, _ = _audit(behaviour, requests, tmp_path, "--scenarios", "repeat", "--strict-unseeded")
    assert strict == 1 and report["summary"]["causes"] == {"unseeded-not-reproducible": 1}
    untouched = Behaviour(seeds="no-deploy-seed", moss_headers=True)
    both, _, output = _audit(untouched, requests, tmp_path, "--allow-unseeded", "--strict-unseeded")
    assert both == 2 and "--allow-unseeded" in flat(output) and untouched.seen == [], output


def test_a_deploy_seed_that_does_not_act_as_a_request_seed_is_deploy_seed_not_applied(requests, tmp_path):
    behaviour = Behaviour(moss_headers=True, deploy_seed_elsewhere=True)
    code, report, _ = _audit(behaviour, requests, tmp_path, "--scenarios", "seeds")
    assert code == 1
    assert _verdicts(report)["unseeded"] == "deploy-seed-not-applied"
    assert "stage-0 seed 42" in report["server"]["requests"]["unseeded"]["detail"]


def test_with_the_deploy_file_an_unseeded_request_that_varies_fails_deploy_seed_not_applied(requests, tmp_path):
    behaviour = Behaviour(seeds="no-deploy-seed")  # no headers: from outside, as vllm-omni 0.30.0
    deploy = RECIPES / "moss_tts_local_v1.5.yaml"
    scenarios = ("--scenarios", "repeat,concurrent,seeds")
    code, report, output = _audit(behaviour, requests, tmp_path, *scenarios, "--deploy", deploy)
    assert code == 1, output
    assert _verdicts(report) == {"seeded": "identical", "unseeded": "deploy-seed-not-applied"}
    detail = report["server"]["requests"]["unseeded"]["detail"]
    assert "stage-0 seed 42" in detail and "process-wide RNG" in detail
    assert report["server"]["deploy_seed"] == {
        "file": str(deploy),
        "seed": 42,
        "checked": True,
        "note": "checked: every unseeded request must give the audio of the same request sent with seed 42",
    }
    # Without the deploy file the same server fails too: not reproducible, for one of two causes that
    # the deploy file tells apart; every report says so.
    files = ("--junit", tmp_path / "j.xml", "--markdown", tmp_path / "s.md", "--report-dir", tmp_path / "dir")
    code, report, output = _audit(behaviour, requests, tmp_path, *scenarios, *files)
    assert code == 1, output
    assert _verdicts(report)["unseeded"] == "unseeded-not-reproducible"
    detail = report["server"]["requests"]["unseeded"]["detail"]
    assert "the server's deploy config gives stage 0 no seed, or it gives one and the deploy seed" in detail
    assert "--deploy FILE (the deploy file the server runs) tells the two apart" in detail
    assert "Deploy seed: not checked: pass --deploy FILE" in flat(output)
    assert "unseeded-not-reproducible" in flat(output) and "tells the two apart" in flat(output)
    junit = ET.parse(tmp_path / "j.xml").getroot()
    failures = [f for f in junit.iter("failure") if f.get("type") == "unseeded-not-reproducible"]
    assert failures and "tells the two apart" in failures[0].get("message")
    for page in (tmp_path / "s.md", tmp_path / "dir" / "index.html"):
        text = page.read_text()
        assert "unseeded-not-reproducible" in text and "tells the two apart" in text, page
    # Accepted with --allow-unseeded: `unseeded` (not a failure), and the report still says how to check.
    code, report, output = _audit(behaviour, requests, tmp_path, *scenarios, "--allow-unseeded")
    assert code == 0 and _verdicts(report)["unseeded"] == "unseeded", output
    assert "--deploy FILE" in report["server"]["requests"]["unseeded"]["detail"]


def test_a_typo_in_the_deploy_file_is_refused_before_anything_is_sent(requests, tmp_path):
    # `sed: 42` would leave the audit no deploy seed to check, and pass a server that ignores it.
    deploy = tmp_path / "typo.yaml"
    deploy.write_text("stages:\n  - stage_id: 0\n    default_sampling_params:\n      sed: 42\n")
    behaviour = Behaviour(seeds="no-deploy-seed")
    code, _, output = _audit(behaviour, requests, tmp_path, "--deploy", deploy)
    assert code == 2 and behaviour.seen == [], output
    assert "typo.yaml:4 [stages.0.default_sampling_params.sed]: unknown key 'sed'" in flat(output)
    assert "did you mean 'seed'" in flat(output)


def test_fields_the_server_would_drop_are_refused_before_anything_is_sent(requests, tmp_path):
    path = tmp_path / "dropped.jsonl"
    write_rows(path, [GREEDY, {"text": "x", "instruction": "Calm."}])
    behaviour = Behaviour()
    code, _, output = _audit(behaviour, path, tmp_path)
    words = flat(output)
    assert code == 2 and "dropped.jsonl" in words and behaviour.seen == []
    assert "dropped.jsonl:1 [audio_temperature]: vllm-omni's speech request has no such field" in words
    assert "dropped.jsonl:2 [instruction]: vllm-omni's MOSS-TTS-Local prompt ignores it" in words
    assert "--allow-dropped-fields" in words
    # Allowed: sent with a warning; a server without moss's headers is taken to sample "greedy" requests.
    code, report, output = _audit(behaviour, path, tmp_path, "--scenarios", "repeat,seeds", "--allow-dropped-fields")
    assert code == 0, output
    probed = [c["run"] for c in report["cases"] if c["request"] == "greedy"]
    assert probed == ["repeat", "unseeded-sent-with-seed-1000003"]
    assert len(report["server"]["dropped_fields"]) == 2
    # moss serve honours audio_temperature 0 (its headers say what it did): greedy requests get no seed probe.
    code, report, output = _audit(
        Behaviour(moss_headers=True), path, tmp_path, "--scenarios", "repeat,seeds", "--allow-dropped-fields"
    )
    assert code == 0, output
    assert [c["run"] for c in report["cases"] if c["request"] == "greedy"] == ["repeat"]


def test_a_server_that_refuses_reference_audio_cannot_be_given_the_voices_scenario_asked_for(requests, tmp_path):
    """Named in --scenarios, a scenario the server refuses is an error (exit 2) with the server's words,
    after the report of what ran before it; left to the default set, it is skipped with them."""
    code, report, output = _audit(Behaviour(refuse_ref_audio=True), requests, tmp_path, "--scenarios", "voices")
    assert code == 2, output
    assert "voices, asked for by name: the server refuses reference audio" in flat(output)
    assert "voices" not in report["summary"]["scenarios"] and report["summary"]["incomplete"]["scenario"] == "voices"
    code, report, output = _audit(Behaviour(refuse_ref_audio=True), requests, tmp_path)
    assert code == 0, output
    assert "refuses reference audio" in report["server"]["skipped"]["voices"]
    assert "skipped voices" in flat(output)


def _output(pcm: np.ndarray, seed_source: str) -> Outcome:
    return Outcome("x", pcm, 24_000, pcm_sha256(pcm), seed_source)


def test_differing_alone_with_greedy_decoding_or_a_claimed_seed_is_run_to_run():
    rules = Rules("codes", 60.0, False, 24_000)
    a, b = synthesize("x", None, 1), synthesize("x", None, 1)  # fresh noise each time
    greedy = Request("g", "x", 1, sampling={"audio_temperature": 0})
    honoured = Rules("codes", 60.0, False, 24_000, greedy=frozenset({"g"}))
    assert alone(greedy, _output(a, "deploy"), _output(b, "deploy"), honoured).cause == RUN_TO_RUN
    claimed = Request("c", "x", 1)  # no seed of its own, yet the server says it applied its deploy seed
    assert alone(claimed, _output(a, "deploy"), _output(b, "deploy"), rules).cause == RUN_TO_RUN
    assert alone(claimed, _output(a, "deploy"), _output(a, "deploy"), rules).stable


@pytest.mark.parametrize("source", ["unknown", "none"])
def test_an_unseeded_request_that_differs_alone_is_not_reproducible_unless_allowed(source):
    """Whatever the server says of its seed (nothing, or that none reached the request), two runs
    alone that differ fail; --allow-unseeded makes it today's `unseeded`, which fails only when strict."""
    a, b = synthesize("x", None, 1), synthesize("x", None, 1)
    unseeded = Request("u", "x", 1)
    rules = Rules("codes", 60.0, False, 24_000, server=True)
    found = alone(unseeded, _output(a, source), _output(b, source), rules)
    assert found.cause == UNSEEDED_NOT_REPRODUCIBLE and found.detail.startswith("not reproducible")
    case = judge("repeat", "repeat", "u", _output(a, source), _output(b, source), found, rules)
    assert case.failed and case.attribution.cause == UNSEEDED_NOT_REPRODUCIBLE
    allowed = Rules("codes", 60.0, False, 24_000, server=True, allow_unseeded=True)
    accepted = alone(unseeded, _output(a, source), _output(b, source), allowed)
    assert accepted.cause == UNSEEDED and accepted.detail == found.detail.removeprefix("not reproducible: ")
    case = judge("repeat", "repeat", "u", _output(a, source), _output(b, source), accepted, allowed)
    assert case.verdict == "unseeded" and not case.failed


def test_an_unseeded_request_identical_alone_that_differs_only_with_its_batch_stays_unseeded():
    """No seed reached it (the server says so) and two runs alone agree: a difference in a batch is
    its draws sharing the batch's stream, reported as `unseeded` (a failure only with --strict-unseeded);
    where the server does not say, the same difference is batch-dependent."""
    a, b = synthesize("x", None, 1), synthesize("x", None, 1)
    unseeded = Request("u", "x", 1)
    for strict in (False, True):
        rules = Rules("codes", 60.0, strict, 24_000, server=True)
        stable = alone(unseeded, _output(a, "none"), _output(a, "none"), rules)
        case = judge("concurrent", "concurrent-8", "u", _output(a, "none"), _output(b, "none"), stable, rules)
        assert case.attribution.cause == UNSEEDED and case.verdict == ("fail" if strict else "unseeded")
        case = judge("concurrent", "concurrent-8", "u", _output(a, "unknown"), _output(b, "unknown"), stable, rules)
        assert case.failed and case.attribution.cause == BATCH_DEPENDENT


@pytest.mark.parametrize(
    "args, message",
    [
        (["--scenarios", "batched"], "unknown scenario(s) batched for a server audit"),
        (["--max-batch", "4"], "--max-batch: only for the local engine"),
        (["--golden", "missing.json"], "golden file does not exist"),
        (["--response-format", "mp3"], "--response-format"),
    ],
)
def test_bad_server_audit_options_exit_2(requests, tmp_path, args, message):
    code, _, output = _audit(Behaviour(), requests, tmp_path, *args)
    assert code == 2 and message in flat(output)


def test_a_server_baseline_saved_today_passes_tomorrow_and_catches_another_build(requests, tmp_path):
    golden = tmp_path / "server-golden.json"
    code, _, output = _audit(Behaviour(), requests, tmp_path, "--save-golden", golden)
    assert code == 0, output
    saved = json.loads(golden.read_text())
    assert saved["environment"]["server"].startswith("http://127.0.0.1:")
    assert saved["requests"]["seeded"]["codes_sha256"] is None  # this server reports no codes: the PCM decides
    again, report, output = _audit(Behaviour(), requests, tmp_path, "--golden", golden)
    assert again == 0 and report["golden"]["passed"], output
    # Another build: every request alone and in every batch agrees with itself, so only the baseline sees it.
    drifted, report, output = _audit(Behaviour(rebuilt=True), requests, tmp_path, "--golden", golden)
    assert drifted == 1 and report["summary"]["failures"] == 0, output
    assert {d["request"]: d["reason"] for d in report["golden"]["drifts"]} == {"seeded": "pcm", "unseeded": "pcm"}
    assert "codes not reported, different PCM bytes" in report["golden"]["drifts"][0]["detail"]
    assert "golden drift: 2 request(s) drifted" in flat(output)


def test_a_server_baseline_with_codes_hashes_names_drifted_codes(requests, tmp_path):
    golden = tmp_path / "golden.json"
    code, _, output = _audit(Behaviour(moss_headers=True), requests, tmp_path, "--save-golden", golden)
    assert code == 0, output
    assert len(json.loads(golden.read_text())["requests"]["seeded"]["codes_sha256"]) == 64
    drifted, report, output = _audit(Behaviour(moss_headers=True, rebuilt=True), requests, tmp_path, "--golden", golden)
    assert drifted == 1, output
    assert {d["reason"] for d in report["golden"]["drifts"]} == {"codes"}  # this fake hashes its PCM as codes


def test_moss_diff_compares_two_server_baselines_by_their_audio(requests, tmp_path):
    today, tomorrow = tmp_path / "today.json", tmp_path / "tomorrow.json"
    assert _audit(Behaviour(), requests, tmp_path, "--save-golden", today)[0] == 0
    assert _audit(Behaviour(rebuilt=True), requests, tmp_path, "--save-golden", tomorrow)[0] == 0
    same = moss("diff", today, today)
    assert same.exit_code == 0, same.output
    differ = moss("diff", today, tomorrow, "--json", tmp_path / "d.json")
    assert differ.exit_code == 1, differ.output
    cases = json.loads((tmp_path / "d.json").read_text())["cases"]
    assert {c["status"] for c in cases} == {"differs"} and {c["codes_equal"] for c in cases} == {None}


def test_an_empty_clip_compares_with_audio_and_with_another_empty_clip():
    """vllm-omni answers a request whose first frame stops with a 0-sample mono WAV."""
    from moss_cli.audit.compare import compare

    empty, audio = np.zeros((0, 1), dtype="<i2"), synthesize("x", 1, 2)
    differ = compare(_output(empty, "unknown"), _output(audio, "unknown"), 24_000)
    assert not differ.pcm_equal and differ.first_diverging_s == 0.0
    same = compare(_output(empty, "unknown"), _output(empty.copy(), "unknown"), 24_000)
    assert same.pcm_equal and same.first_diverging_s is None


def test_every_problem_of_a_request_file_for_a_server_is_reported_at_once(tmp_path):
    path = tmp_path / "mixed.jsonl"
    (tmp_path / "silence.wav").write_bytes(b"not audio")
    rows = [
        {"text": "x", "seed": "five"},
        {"text": "y", "ref_audio": "silence.wav"},
        {"text": "z", "audio_top_k": 3},
    ]
    write_rows(path, rows)
    behaviour = Behaviour()
    code, _, output = _audit(behaviour, path, tmp_path)
    words = flat(output)
    assert code == 2 and behaviour.seen == []
    for where in ("mixed.jsonl:1 [seed]", "mixed.jsonl:2 [ref_audio]", "mixed.jsonl:3 [audio_top_k]"):
        assert where in words, words
