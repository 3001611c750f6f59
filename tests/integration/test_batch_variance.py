"""Servers that are not batch-invariant, against the vllm-omni double speaking real words (espeak-ng):
the audit answers the seed question (runs alone, bitwise at every level) apart from the numerics one
(compositions), and at `--level speech` tells a response that is other bits of the same speech (a
warning) from one that says other words (`different-speech`, a failure naming its evidence)."""

import json
import shutil
import sys
from pathlib import Path

import pytest
import soundfile as sf
from cli_runs import AuditRun, moss, moss_audit, write_rows  # tests/ is on sys.path
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.audit.page import audit_view
from moss_cli.io.reference_audio import synthetic_voice

pytestmark = pytest.mark.skipif(shutil.which("espeak-ng") is None, reason="espeak-ng is not installed")
speech_extra = pytest.importorskip  # the speech level's packages: skipped where absent, as the CLI refuses

DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42
ROWS = [  # no frame budget: every word is said, so half of them is audibly less
    {"id": "plain", "text": "The quick brown fox jumps over the lazy dog."},
    {"id": "seeded", "text": "A seed of its own keeps these words steady.", "seed": 7},
    {"id": "other", "text": "Every morning the baker opens the shop at six."},
    {"id": "short", "text": "Yes.", "seed": 11},  # one word: nothing to cut
]
UNSEEDED = {"plain", "other"}
SCENARIOS = ("--scenarios", "repeat,concurrent,seeds")


def _requests(tmp_path: Path) -> Path:
    sf.write(str(tmp_path / "voice.wav"), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    return write_rows(tmp_path / "requests.jsonl", [{**row, "ref_audio": "voice.wav"} for row in ROWS])


def _audit(engine: FakeMossLocalEngine, tmp_path: Path, level: str, *extra) -> AuditRun:
    with serving_vllm_omni(engine) as url:
        return moss_audit(
            _requests(tmp_path), "--deploy", DEPLOY, "--level", level, *SCENARIOS, *extra,
            server=url, stagger_ms=5, report=tmp_path / f"audit-{level}.json", flat_output=True,
        )  # fmt: skip


def _verdicts(report: dict) -> dict[str, str]:
    return {key: v["verdict"] for key, v in report["server"]["requests"].items()}


@pytest.fixture(autouse=True)
def _speech_packages():
    speech_extra("librosa")


@pytest.mark.parametrize("level", ["codes", "waveform", "speech", "bitwise"])
def test_the_released_server_fails_the_seed_question_for_exactly_the_unseeded_requests_at_every_level(tmp_path, level):
    code, report, output = _audit(FakeMossLocalEngine(fixed=False, speak=True), tmp_path, level)
    assert code == 1, output
    verdicts = _verdicts(report)
    assert {k for k, v in verdicts.items() if v != "identical"} == UNSEEDED, verdicts
    assert {verdicts[k] for k in UNSEEDED} == {"deploy-seed-not-applied"}
    seed, numerics = report["questions"]["seed"], report["questions"]["numerics"]
    assert seed["verdict"] == "deploy-seed-not-applied" and set(seed["failed"]) == UNSEEDED
    assert numerics["passed"] and numerics["verdict"] == "batch-invariant"  # the seeded requests never vary
    assert output.startswith("Seed: FAIL deploy-seed-not-applied — 2 of 4 requests")


def test_a_server_whose_arithmetic_follows_the_batch_passes_the_speech_level_with_a_warning(tmp_path):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="flip")
    code, report, output = _audit(engine, tmp_path, "speech")
    assert code == 0, output
    seed, numerics = report["questions"]["seed"], report["questions"]["numerics"]
    assert (seed["verdict"], seed["passed"]) == ("pass", True)
    assert (numerics["verdict"], numerics["passed"]) == ("numeric-batch-variance", True)
    assert set(numerics["differ"]) == {"plain", "seeded", "other", "short"}
    assert set(numerics["seeded"]) == {"seeded", "short"} and numerics["compositions"] == ["concurrent"]
    assert numerics["same_speech"] == 4 and not numerics["different_speech"]
    assert "Seed: PASS — every unseeded request's randomness is its own (2 unseeded of 4 requests" in output
    assert "Numerics: warning numeric-batch-variance — 4 of 4 requests (2 seeded)" in output
    assert "seeded requests show it too" in output and "VLLM_BATCH_INVARIANT=1" in output
    same = [c for c in report["cases"] if c["verdict"] == "same-speech"]
    assert len(same) == 4 and all(c["speech"]["same"] and c["alone"] is False for c in same)
    assert all(c["alone"] for c in report["cases"] if c["scenario"] in ("repeat", "seeds"))


def test_a_server_whose_arithmetic_follows_the_batch_fails_the_waveform_level_on_numerics_only(tmp_path):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="flip")
    code, report, output = _audit(engine, tmp_path, "waveform")
    assert code == 1, output
    assert set(report["summary"]["causes"]) == {"numeric-batch-variance"}  # no seed verdict
    assert set(_verdicts(report).values()) == {"numeric-batch-variance"}
    assert report["questions"]["seed"]["verdict"] == "pass"
    assert report["questions"]["numerics"]["verdict"] == "numeric-batch-variance"
    assert "Numerics: FAIL numeric-batch-variance — 4 of 4 requests (2 seeded)" in output


def test_a_server_that_says_part_of_its_text_under_load_fails_different_speech_naming_only_those(tmp_path):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps="cut")
    code, report, output = _audit(engine, tmp_path, "speech")
    assert code == 1, output
    texts = {row["text"]: row["id"] for row in ROWS}
    cut = {texts[job.spoken] for job in engine.jobs if job.cut and job.spoken in texts}
    assert cut, "no audited request shared its first step with another"
    verdicts = _verdicts(report)
    assert {k for k, v in verdicts.items() if v == "different-speech"} == cut
    assert set(report["summary"]["causes"]) == {"different-speech"}
    numerics = report["questions"]["numerics"]
    assert numerics["verdict"] == "different-speech" and set(numerics["different_speech"]) == cut
    assert report["questions"]["seed"]["verdict"] == "pass"
    # The evidence: the composition, the path, each measure next to its threshold, both durations.
    case = next(c for c in report["cases"] if c["verdict"] == "fail")
    detail = case["attribution"]["detail"]
    assert "not the same speech as alone in concurrent/concurrent-8 (single path)" in detail
    assert f"{case['speech']['failed']} failed" in detail and "threshold" in detail and "s alone" in detail
    alone_s, here_s = case["speech"]["durations"]
    assert here_s < alone_s  # it said less
    assert "Numerics: FAIL different-speech — not the same speech as alone:" in output
    # The page puts the alone and the loaded audio side by side, with the measures.
    (pair,) = [p for p in audit_view(report).pairs if p.title.startswith(f"{case['request']} in concurrent")]
    assert [label for label, _ in pair.audio] == ["alone", "concurrent-8"]
    assert ("same speech", f"no ({case['speech']['failed']} failed)") in pair.metrics


def test_the_speech_level_without_its_packages_exits_2_with_the_install_line_before_anything_is_sent(
    tmp_path, monkeypatch
):
    monkeypatch.setitem(sys.modules, "librosa", None)  # import fails
    engine = FakeMossLocalEngine(fixed=True, speak=True)
    code, report, output = _audit(engine, tmp_path, "speech")
    assert code == 2 and report == {} and "Traceback" not in output
    assert "--level" in output and "pip install librosa" in output
    assert engine.received == []


def test_a_batch_invariant_server_that_applies_the_deploy_seed_passes_the_speech_level_untouched(tmp_path):
    code, report, output = _audit(FakeMossLocalEngine(fixed=True, speak=True), tmp_path, "speech")
    assert code == 0, output
    assert set(_verdicts(report).values()) == {"identical"}
    assert report["questions"]["numerics"]["verdict"] == "batch-invariant"
    assert all(c["speech"] is None for c in report["cases"])  # identical audio: nothing to measure


@pytest.mark.parametrize("shared_steps, passed", [("flip", True), ("cut", False)])
def test_diff_at_the_speech_level_passes_other_bits_of_the_same_words_and_fails_fewer_words(
    tmp_path, shared_steps, passed
):
    """Two runs of one request file, one request at a time (A) and four at once (B)."""
    requests = _requests(tmp_path)
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True, speak=True, shared_steps=shared_steps)) as url:
        for side, concurrency in (("a", "1"), ("b", "4")):
            made = moss("synth", requests, "--server", url, "--concurrency", concurrency, "--out", tmp_path / side)
            assert made.exit_code == 0, made.output
    bitwise = moss("diff", tmp_path / "a", tmp_path / "b", "--json", tmp_path / "bitwise.json")
    assert bitwise.exit_code == 1  # the bits differ either way
    speech = moss("diff", tmp_path / "a", tmp_path / "b", "--level", "speech", "--json", tmp_path / "speech.json")
    assert speech.exit_code == (0 if passed else 1), speech.output
    cases = {c["id"]: c for c in json.loads((tmp_path / "speech.json").read_text())["cases"]}
    differing = {key for key, c in cases.items() if not c["pcm_equal"]}
    assert differing and all(cases[key]["speech"] is not None for key in differing)
    if passed:
        assert {cases[key]["status"] for key in differing} == {"same-speech"}
        assert all("the same speech" in cases[key]["detail"] for key in differing)
    else:
        failed = {key for key, c in cases.items() if c["verdict"] == "fail"}
        assert failed and {cases[key]["cause"] for key in failed} == {"different-speech"}
        assert all(cases[key]["speech"]["durations"][1] < cases[key]["speech"]["durations"][0] for key in failed)


@pytest.mark.parametrize("shared_steps, code", [("flip", 0), ("cut", 1)])
def test_bench_at_the_speech_level_counts_bitwise_same_speech_and_different_speech_responses(
    tmp_path, shared_steps, code
):
    engine = FakeMossLocalEngine(fixed=True, speak=True, shared_steps=shared_steps)
    out = tmp_path / "bench.json"
    with serving_vllm_omni(engine) as url:
        result = moss(
            "bench", "--server", url, "--requests", _requests(tmp_path), "--deploy", DEPLOY, "--level", "speech",
            "--concurrency", "1,4", "--num-requests", "8", "--repeats", "1", "--warmup", "0", "--no-stream",
            "--json", out,
        )  # fmt: skip
    assert result.exit_code == code, result.output
    report = json.loads(out.read_text())
    rows = {(r["arm"], r["max_concurrency"]): r["checks"] for r in report["results"]}
    for arm in ("unseeded", "seeded"):
        assert rows[(arm, 1)]["identical"] == 8  # one at a time: the bits of the request alone
        loaded = rows[(arm, 4)]
        assert loaded["identical"] + loaded["same-speech"] + loaded["different-speech"] == 8
    responses = [r for r in report["responses"] if r["check"] in ("same-speech", "different-speech")]
    assert responses and all(r["speech"]["measures"] for r in responses)  # every response's measures
    different = [r for r in report["responses"] if r["check"] == "different-speech"]
    if shared_steps == "flip":
        assert not different and sum(rows[(arm, 4)]["same-speech"] for arm in ("unseeded", "seeded")) > 0
    else:
        assert different
        named = " ".join(report["summary"]["varied"])
        assert all(f"{r['label']} is not the same speech" in named for r in different)
