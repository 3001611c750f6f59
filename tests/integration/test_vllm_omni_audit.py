"""`moss audit-determinism --server` and `moss synth --server` against a server that behaves like
vllm-omni 0.30.0's MOSS-TTS-Local (tests/vllm_omni_server.py): it requires `ref_audio`, drops
unknown fields, answers 48 kHz stereo, streams server-sent events, and samples unseeded requests
from one process-wide RNG (before the deploy-seed fix) or from the deploy seed (after it)."""

import re
from pathlib import Path

import httpx
import numpy as np
import pytest
import soundfile as sf
from cli_runs import AuditRun, moss, moss_audit, write_rows  # tests/ is on sys.path
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.remote.reply import decode_audio
from moss_cli.speech_api import body_from_request

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42
BUILT_IN_UNSEEDED = {"short-unseeded", "long-unseeded", "twin-a", "twin-b", "instructed"}


def _audit(url: str, tmp_path: Path, *args) -> AuditRun:
    return moss_audit(*args, server=url, stagger_ms=5, report=tmp_path / "audit.json", flat_output=True)


def _verdicts(report: dict) -> dict[str, str]:
    return {key: v["verdict"] for key, v in report["server"]["requests"].items()}


def _voice_file(tmp_path: Path) -> Path:
    path = tmp_path / "voice.wav"
    sf.write(str(path), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    return path


def _requests_with_references(tmp_path: Path) -> Path:
    voice = _voice_file(tmp_path).name
    rows = [
        {"id": "unseeded", "text": "No seed of its own.", "ref_audio": voice, "max_new_frames": 12},
        {"id": "seeded", "text": "A seed of its own.", "ref_audio": voice, "seed": 7, "max_new_frames": 10},
        {"id": "continued", "text": " and on it goes.", "ref_audio": voice, "ref_text": "It starts", "language": "en"},
    ]
    return write_rows(tmp_path / "voices.jsonl", rows)


@pytest.mark.slow  # the whole default audit: a few hundred requests
def test_before_the_fix_exactly_the_unseeded_requests_fail_deploy_seed_not_applied(tmp_path):
    with serving_vllm_omni(FakeMossLocalEngine(fixed=False)) as url:
        code, report, output = _audit(url, tmp_path, "--deploy", DEPLOY, "--level", "bitwise")
    assert code == 1, output
    verdicts = _verdicts(report)
    assert {k for k, v in verdicts.items() if v != "identical"} == BUILT_IN_UNSEEDED, verdicts
    assert {verdicts[k] for k in BUILT_IN_UNSEEDED} == {"deploy-seed-not-applied"}
    assert set(report["summary"]["causes"]) == {"deploy-seed-not-applied"}
    detail = report["server"]["requests"]["long-unseeded"]["detail"]
    assert "stage-0 seed 42" in detail and "process-wide RNG" in detail
    # It ran as the server requires: every request carried a reference voice, and streams were read.
    assert report["server"]["reference_voice"].startswith("required (MOSS-TTS-Local-Transformer requires 'ref_audio'")
    assert "streaming" in report["summary"]["scenarios"] and not report["server"]["skipped"]
    assert "deploy-seed-not-applied" in output
    # docs/server-audit.md shows this audit's table path x verdict: its figures are these.
    doc = (ROOT / "docs" / "server-audit.md").read_text()
    shown = {
        row[0].strip("`"): (row[2], row[3], row[4], int(row[5]), int(row[6]))
        for row in ([cell.strip() for cell in line.strip("|").split("|")] for line in doc.splitlines())
        # path, route, verdict, seed, numerics, counts, detail
        if len(row) == 8 and row[0].strip("`") in report["server"]["paths"]
    }
    paths = report["server"]["paths"]
    assert shown == {
        path: (
            v["verdict"],
            *(v["questions"][q]["verdict"] for q in ("seed", "numerics")),
            v["requests"],
            v["comparisons"],
        )
        for path, v in paths.items()
    }
    probes = re.search(
        r"the deploy-seed probes of the unseeded\s+requests it answered "
        r"\((\d+) of the (\d+), of the (\d+) and of the (\d+)\)",
        doc,
    )
    assert probes and tuple(map(int, probes.groups())) == (
        len(BUILT_IN_UNSEEDED),
        paths["sse"]["comparisons"],
        paths["batch"]["comparisons"],
        paths["websocket"]["comparisons"],
    )


@pytest.mark.slow  # the whole default audit: a few hundred requests
def test_after_the_fix_the_built_in_audit_passes_unchanged(tmp_path):
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        code, report, output = _audit(url, tmp_path, "--deploy", DEPLOY, "--level", "bitwise")
    assert code == 0, output
    assert set(_verdicts(report).values()) == {"identical"}
    assert report["server"]["deploy_seed"]["checked"] and report["server"]["deploy_seed"]["seed"] == 42
    probes = {c["request"] for c in report["cases"] if c["run"] == "the-deploy-seed-sent-explicitly"}
    assert probes == BUILT_IN_UNSEEDED
    # The server got no field it would drop, and every request a reference voice.
    speech = [body for body in engine.received if "input" in body]
    assert speech and all("ref_audio" in body for body in speech[1:])  # the first: the probe without one
    assert not any({"temperature", "audio_temperature", "instructions", "extra_params"} & set(b) for b in speech)
    assert any(body.get("stream") for body in speech)  # the streaming scenario asked for server-sent events


def test_after_the_fix_a_request_file_with_references_passes(tmp_path):
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        code, report, output = _audit(url, tmp_path, _requests_with_references(tmp_path), "--deploy", DEPLOY)
    assert code == 0, output
    assert _verdicts(report) == {"unseeded": "identical", "seeded": "identical", "continued": "identical"}


def test_without_the_deploy_file_the_old_server_is_not_reproducible_and_the_report_says_how_to_tell(tmp_path):
    path = _requests_with_references(tmp_path)
    scenarios = ("--scenarios", "repeat,concurrent,seeds")
    with serving_vllm_omni(FakeMossLocalEngine(fixed=False)) as url:
        code, report, output = _audit(url, tmp_path, path, *scenarios)
        allowed, accepted, allowed_output = _audit(url, tmp_path, path, *scenarios, "--allow-unseeded")
    assert code == 1, output
    failing = "unseeded-not-reproducible"
    assert _verdicts(report) == {"unseeded": failing, "seeded": "identical", "continued": failing}
    detail = report["server"]["requests"]["unseeded"]["detail"]
    assert "the server's deploy config gives stage 0 no seed" in detail and "process-wide RNG" in detail
    assert "--deploy FILE (the deploy file the server runs) tells the two apart" in detail
    assert "or a retry with a random seed" in report["server"]["requests"]["continued"]["detail"]  # no frame budget
    assert "Deploy seed: not checked" in output
    # Accepted: reported as unseeded, not a failure.
    assert allowed == 0, allowed_output
    assert _verdicts(accepted) == {"unseeded": "unseeded", "seeded": "identical", "continued": "unseeded"}


def test_a_request_file_without_references_is_refused_before_the_audit(tmp_path):
    path = tmp_path / "plain.jsonl"
    path.write_text('{"id": "a", "text": "No voice."}\n{"id": "b", "text": "Nor here.", "seed": 3}\n')
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        code, _, output = _audit(url, tmp_path, path, "--deploy", DEPLOY)
    assert code == 2 and "Traceback" not in output
    assert "plain.jsonl:1 [ref_audio]" in output and "line(s) 1, 2 have no ref_audio" in output
    assert len(engine.received) == 1  # only the probe that learnt it


def test_fields_vllm_omni_drops_are_refused_and_a_dropped_greedy_is_judged_sampled(tmp_path):
    path = tmp_path / "dropped.jsonl"
    voice = _voice_file(tmp_path).name
    write_rows(path, [{"id": "g", "text": "Greedy?", "ref_audio": voice, "audio_temperature": 0}])
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        code, _, output = _audit(url, tmp_path, path)
        assert code == 2 and "dropped.jsonl:1 [audio_temperature]" in output and engine.received == []
        code, report, output = _audit(url, tmp_path, path, "--scenarios", "repeat,seeds", "--allow-dropped-fields")
    assert code == 0, output
    # vllm-omni samples it: it got the seed probe a sampled request gets, and the seed changed its audio.
    assert [c["run"] for c in report["cases"]] == ["repeat", "unseeded-sent-with-seed-1000003"]
    assert "line 1 [audio_temperature]" in report["server"]["dropped_fields"][0]


def test_synth_through_the_server_writes_48_khz_stereo_files_equal_to_what_it_sends(tmp_path):
    path = _requests_with_references(tmp_path)
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        for fmt in ("wav", "pcm"):
            out = tmp_path / f"out-{fmt}"
            result = moss("synth", path, "--server", url, "--out", out, "--response-format", fmt)
            assert result.exit_code == 0, result.output
        from moss_cli.config.requests import read_requests

        sent = {}
        for request in read_requests(path):
            body = body_from_request(request, response_format="wav")
            answer = httpx.post(f"{url}/v1/audio/speech", json=body, timeout=60)
            sent[request.id] = decode_audio(
                answer.content, "wav", answer.headers["content-type"], sample_rate=1, channels=1
            )
    for fmt in ("wav", "pcm"):
        manifest = (tmp_path / f"out-{fmt}" / "manifest.csv").read_text().splitlines()
        assert len(manifest) == 4
        for key in ("seeded", "unseeded", "continued"):
            samples, rate = sf.read(tmp_path / f"out-{fmt}" / f"{key}.wav", dtype="int16", always_2d=True)
            assert rate == 48_000 and samples.shape[1] == 2
            expected, expected_rate = sent[key]
            assert expected_rate == 48_000 and np.array_equal(samples, expected), key
