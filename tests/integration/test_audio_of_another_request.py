"""Byte-stable but wrong: a server that answers requests with another request's audio, the same in
every composition, passes every per-request comparison; the audit fails it as
`audio-of-another-request`, naming both requests, where the server reports no codes. Honest
servers (the vllm-omni double after the fix, `moss serve`) get no such verdict, twins included."""

from pathlib import Path
from xml.etree import ElementTree as ET

import numpy as np
import soundfile as sf
from cli_runs import AuditRun, moss_audit, write_rows  # tests/ is on sys.path
from serve_helpers import running
from speech_servers import Behaviour, serving
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.audit import mixups
from moss_cli.audit.mixups import MixUpLog
from moss_cli.audit.verdicts import AUDIO_OF_ANOTHER_REQUEST
from moss_cli.io.audio import pcm_sha256
from moss_cli.io.outcome import Outcome
from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.pipeline import SynthOptions

ROWS = [
    {"id": "first", "text": "The first request of the batch.", "seed": 5, "max_new_frames": 3},
    {"id": "other-text", "text": "Another text, with the same seed.", "seed": 5, "max_new_frames": 3},
    {"id": "unseeded", "text": "A third text, without a seed.", "max_new_frames": 3},
    {"id": "first-twin", "text": "The first request of the batch.", "seed": 5, "max_new_frames": 3},
]
STRANGERS = {"other-text", "unseeded"}  # what the talker reads differs from the first's: they cannot share its audio
FEW = ("--scenarios", "repeat,concurrent")  # without the seed probes, which catch this server's seeds too


def _audit(url: str, requests: Path, tmp_path: Path, *extra) -> AuditRun:
    return moss_audit(requests, *extra, server=url, stagger_ms=5, report=tmp_path / "audit.json", flat_output=True)


def _flagged(report: dict) -> dict[tuple[str, str], str]:
    """(request, scenario/run) -> the request whose audio it has, for every audio-of-another-request case."""
    return {
        (c["request"], f"{c['scenario']}/{c['run']}"): c["other"]
        for c in report["cases"]
        if (c["attribution"] or {}).get("cause") == AUDIO_OF_ANOTHER_REQUEST
    }


def test_a_server_answering_every_request_with_the_first_ones_audio_fails_naming_both(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", ROWS)
    folder = tmp_path / "r"
    with serving(Behaviour(cache_by_budget=True)) as url:
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "bitwise", "--report-dir", folder)
    assert code == 1, output
    # Byte-stable: every comparison with the request's own reference passes ...
    assert all(c["verdict"] == "pass" for c in report["cases"] if c["other"] is None)
    # ... and in every composition, alone and in flight together, each stranger has the first's audio.
    runs = {"reference/alone", "repeat/repeat", "concurrent/concurrent-8"}
    assert _flagged(report) == {(key, run): "first" for key in STRANGERS for run in runs}
    verdicts = report["server"]["requests"]
    assert {k: v["verdict"] for k, v in verdicts.items()} == {
        "first": "identical",
        "first-twin": "identical",  # the same content as the first: its audio is rightly the same
        "other-text": AUDIO_OF_ANOTHER_REQUEST,
        "unseeded": AUDIO_OF_ANOTHER_REQUEST,
    }
    detail = verdicts["other-text"]["detail"]
    assert "the same audio as request 'first'" in detail and "identical PCM" in detail and "differ in text" in detail
    assert report["summary"]["causes"] == {AUDIO_OF_ANOTHER_REQUEST: 6}
    assert report["warnings"] == []  # a failure now, not also a warning
    # Every report says so: the terminal, JUnit, Markdown and the page, with both responses' audio.
    assert "audio-of-another-request" in output and "'first'" in output
    testcases = ET.parse(folder / "junit.xml").getroot().iter("testcase")
    failed = {
        (tc.get("classname"), tc.get("name"))
        for tc in testcases
        if tc.find("failure") is not None and tc.find("failure").get("type") == AUDIO_OF_ANOTHER_REQUEST
    }
    assert {(f"audit.{run.replace('/', '.')}", key) for key in STRANGERS for run in runs} <= failed
    markdown = (folder / "summary.md").read_text()
    assert "| other-text | reference/alone | audio-of-another-request |" in markdown
    page = (folder / "index.html").read_text()
    assert "audio-of-another-request" in page and "diverging/reference/first.alone.wav" in page
    pair = [
        sf.read(folder / "diverging" / "concurrent" / f"{k}.concurrent-8.wav", dtype="int16")[0]
        for k in ("first", "other-text")
    ]
    assert np.array_equal(*pair)


def test_nearly_the_same_audio_counts_too(tmp_path):
    # The cached audio comes back a last bit off: not identical, SNR far above 60 dB.
    requests = write_rows(tmp_path / "r.jsonl", ROWS[:2])
    with serving(Behaviour(cache_by_budget=True, cache_rounding=True)) as url:
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "waveform")
    assert code == 1, output
    assert set(_flagged(report)) == {
        ("other-text", r) for r in ("reference/alone", "repeat/repeat", "concurrent/concurrent-8")
    }
    [near] = [c for c in report["cases"] if c["other"] and c["scenario"] == "concurrent"]
    assert not near["comparison"]["pcm_equal"] and near["comparison"]["snr_db"] > 60
    assert "SNR" in near["attribution"]["detail"] and ">= 60 dB" in near["attribution"]["detail"]


def test_an_honest_server_without_codes_is_not_flagged_twins_included(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", ROWS)
    with serving(Behaviour()) as url:
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "bitwise")
    assert code == 0, output
    assert _flagged(report) == {} and report["warnings"] == []
    assert report["reference"]["first"]["pcm_sha256"] == report["reference"]["first-twin"]["pcm_sha256"]


def test_the_vllm_omni_double_after_the_fix_is_not_flagged(tmp_path):
    voice = tmp_path / "voice.wav"
    sf.write(str(voice), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    rows = [
        {"id": "a", "text": "Unseeded, so it gets the deploy seed.", "ref_audio": voice.name, "max_new_frames": 8},
        {"id": "b", "text": "Another unseeded text, the same seed.", "ref_audio": voice.name, "max_new_frames": 8},
        {"id": "a-twin", "text": "Unseeded, so it gets the deploy seed.", "ref_audio": voice.name, "max_new_frames": 8},
        {
            "id": "seeded",
            "text": "Unseeded, so it gets the deploy seed.",
            "ref_audio": voice.name,
            "seed": 42,
            "max_new_frames": 8,
        },
    ]
    requests = write_rows(tmp_path / "r.jsonl", rows)
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "bitwise")
    assert code == 0, output
    assert _flagged(report) == {}
    # The seeded one, with the deploy seed, has the unseeded same text's audio: only the seed differs, a warning.
    assert report["reference"]["a"]["pcm_sha256"] == report["reference"]["seeded"]["pcm_sha256"]
    assert [w["requests"] for w in report["warnings"]] == [["a", "seeded"]]


def test_moss_serve_is_not_flagged_twins_included(tmp_path):
    rows = [
        {"id": "a", "text": "One text.", "seed": 3, "max_new_frames": 6},
        {"id": "b", "text": "A quite different text.", "seed": 3, "max_new_frames": 6},
        {"id": "a-twin", "text": "One text.", "seed": 3, "max_new_frames": 6},
        {"id": "unseeded", "text": "One text.", "max_new_frames": 6},
    ]
    requests = write_rows(tmp_path / "r.jsonl", rows)
    with running(SynthOptions(device="cpu")) as (url, _):
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "bitwise")
    assert code == 0, output
    assert _flagged(report) == {} and report["warnings"] == []
    assert report["reference"]["a"]["pcm_sha256"] == report["reference"]["a-twin"]["pcm_sha256"]


def test_where_the_server_reports_codes_identical_codes_stay_a_warning(tmp_path):
    # The codes hash says the model made the same codes: a model can ignore a text (the tiny checkpoints can).
    requests = write_rows(tmp_path / "r.jsonl", ROWS[:2])
    with serving(Behaviour(cache_by_budget=True, moss_headers=True)) as url:
        code, report, output = _audit(url, requests, tmp_path, *FEW, "--level", "bitwise")
    assert code == 0, output
    assert _flagged(report) == {}
    [warning] = report["warnings"]
    assert warning["kind"] == "identical-codes" and warning["requests"] == ["first", "other-text"]


def _outcome(key: str, pcm: np.ndarray, text: str) -> Outcome:
    return Outcome(key, pcm, 48_000, pcm_sha256(pcm), "unknown", content={"text": text, "seed": None})


def test_only_clips_of_one_shape_a_norm_and_a_subset_the_snr_allows_are_measured(monkeypatch):
    rng = np.random.default_rng(0)
    clip = (rng.standard_normal((4800, 2)) * 3000).astype("<i2")
    outputs = {
        "a": _outcome("a", clip, "a"),
        "b": _outcome("b", clip ^ np.int16(1), "b"),  # last bits off: about 80 dB
        "louder": _outcome("louder", (clip * 2).astype("<i2"), "c"),  # 6 dB louder: cannot be within 60 dB
        "inverted": _outcome("inverted", -clip, "g"),  # as loud, and unlike it at every sample
        "longer": _outcome("longer", np.concatenate([clip, clip[:10]]), "d"),
        "silent": _outcome("silent", np.zeros_like(clip), "e"),
        "silent-too": _outcome("silent-too", np.zeros_like(clip), "f"),
    }
    measured = []
    real = mixups.snr_db
    monkeypatch.setattr(mixups, "snr_db", lambda x, y: measured.append(1) or real(x, y))
    log = MixUpLog(list(outputs), min_snr_db=60.0)
    [found] = log.add("concurrent", "concurrent-8", outputs)
    assert found.members == ["a", "b"] and found.strangers == {"b": ["text"]} and found.snr_db > 60
    assert len(measured) == 1  # b against a: nothing else passed the shape, norm and subset checks
