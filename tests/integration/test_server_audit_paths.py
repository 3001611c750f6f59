"""`moss audit-determinism --server`: every path a deployment serves gets a verdict (the single
route, server-sent events, raw audio streams, the batch route, the WebSocket stream), in every
report. vllm-omni 0.30.0's batch items carry no seed (protocol/audio.py:446-463), so the batch path audits the unseeded
requests as items of one call while the others go as single requests at the same time: before the
deploy-seed fix its items fail `deploy-seed-not-applied`, after it they pass; a server without the
batch route skips that path and says why."""

import asyncio
from pathlib import Path
from xml.etree import ElementTree as ET

import httpx
import pytest
import soundfile as sf
from cli_runs import AuditRun, moss_audit, write_rows  # tests/ is on sys.path
from serve_helpers import running
from speech_servers import Behaviour, serving
from vllm_omni_server import FakeMossLocalEngine, SpeechBatchItem, data_url, reference_wav, serving_vllm_omni

from moss_cli.audit.page import audit_view
from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.pipeline import SynthOptions
from moss_cli.remote.client import ServerError, SpeechClient
from moss_cli.remote.settings import ServerOptions

DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42
UNSEEDED = ["plain", "continued"]
PATHS = ["single", "sse", "raw-stream", "batch", "websocket"]
ALL_PATHS = "repeat,streaming,raw-stream,batch,websocket"
REPORTS = {"junit": "junit.xml", "markdown": "summary.md"}  # and the JSON report, audit.json


def _audit(url: str, folder: Path, *args) -> AuditRun:
    """The audit with its JSON, JUnit and Markdown reports in `folder` (no --report-dir: its plots
    of every diverging pair take long)."""
    folder.mkdir()
    reports = [f"--{kind}={folder / name}" for kind, name in REPORTS.items()]
    return moss_audit(*reports, *args, server=url, stagger_ms=5, report=folder / "audit.json", flat_output=True)


def _path_suite(folder: Path) -> ET.Element:
    return next(s for s in ET.parse(folder / "junit.xml").getroot() if s.get("name") == "audit.paths")


def _page_paths(report: dict) -> list[tuple[str, str, str]]:
    """The HTML page's table path x verdict: (path, verdict, row class) per row."""
    (blocks,) = [blocks for heading, blocks in audit_view(report).sections if heading.startswith("Server")]
    table = blocks[0]
    assert table.headers[:3] == ["path", "route", "verdict"]
    return [(row[0], row[2], cls) for row, cls in zip(table.rows, table.classes)]


def _paths(report: dict) -> dict[str, str]:
    return {path: v["verdict"] for path, v in report["server"]["paths"].items()}


def _requests(folder: Path) -> Path:
    """Two unseeded requests (one in continuation mode) and a seeded one, each with a reference voice."""
    sf.write(str(folder / "voice.wav"), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    rows = [
        {"id": "plain", "text": "No seed of its own.", "ref_audio": "voice.wav", "max_new_frames": 8},
        {"id": "seeded", "text": "A seed of its own.", "ref_audio": "voice.wav", "seed": 7, "max_new_frames": 6},
        {"id": "continued", "text": " and on it goes.", "ref_audio": "voice.wav", "ref_text": "It starts"},
    ]
    return write_rows(folder / "requests.jsonl", rows)


def _batch_run(report: dict) -> dict:
    return next(
        run for label, run in report["server"]["runs"].items() if label.startswith("batch/") and "items-in" in label
    )


def test_before_the_fix_the_batch_items_fail_deploy_seed_not_applied_on_every_path(tmp_path):
    engine = FakeMossLocalEngine(fixed=False)
    with serving_vllm_omni(engine) as url:
        code, report, output = _audit(
            url, tmp_path / "r", _requests(tmp_path), "--deploy", DEPLOY, "--scenarios", ALL_PATHS
        )
    assert code == 1, output
    assert _paths(report) == dict.fromkeys(PATHS, "deploy-seed-not-applied")
    batch = report["server"]["paths"]["batch"]
    assert batch["failed"] == dict.fromkeys(UNSEEDED, "deploy-seed-not-applied")
    assert batch["requests"] == len(UNSEEDED) and "a batch item carries no seed" in batch["detail"]
    assert "SpeechBatchItem has no seed field" in batch["detail"]
    # Each item went alone first, the one item of its own call (the seed question: bitwise); then one
    # call held the unseeded requests, without a seed; the seeded ones and two neighbours went alone at
    # the same time, and shared the engine's batch with the items.
    *alone, sent = engine.received_batches[1:]  # the first: the check that the route exists
    assert [[item["input"] for item in call["items"]] for call in alone] == [
        ["No seed of its own."],
        [" and on it goes."],
    ]
    assert "sent alone as the one item of a batch call" in batch["detail"]
    assert [item["input"] for item in sent["items"]] == ["No seed of its own.", " and on it goes."]
    assert not any("seed" in item for item in sent["items"]) and sent["items"][1]["ref_text"] == "It starts"
    assert all(set(item) <= set(SpeechBatchItem.model_fields) for item in sent["items"])  # nothing is dropped
    assert _batch_run(report)["max_in_flight_client"] == len(UNSEEDED) + 3
    item_jobs = [job for job in engine.jobs if job.conditioning.text == "No seed of its own."]
    assert {job.rng_source for job in item_jobs} == {"shared"} and max(job.max_batch for job in item_jobs) > 3
    assert any(body.get("stream_format") == "audio" for body in engine.received)  # the raw stream was asked for
    # The table in every report, naming the items.
    suite = _path_suite(tmp_path / "r")
    assert [c.get("name") for c in suite] == PATHS and suite.get("failures") == "5"
    failure = next(c for c in suite if c.get("name") == "batch").find("failure")
    assert failure.get("type") == "deploy-seed-not-applied" and "continued (deploy-seed-not-applied)" in failure.get(
        "message"
    )
    markdown = (tmp_path / "r" / "summary.md").read_text()
    assert (
        "| `batch` | POST /v1/audio/speech/batch, items in one call (no seed) | deploy-seed-not-applied |" in markdown
    )
    assert "verdict per path" in output and "deploy-seed-not-applied" in output
    assert _page_paths(report) == [(path, "deploy-seed-not-applied", "fail") for path in PATHS]


def test_after_the_fix_every_path_passes_and_batch_items_get_the_deploy_seed(tmp_path):
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        code, report, output = _audit(
            url, tmp_path / "r", _requests(tmp_path), "--deploy", DEPLOY, "--scenarios", ALL_PATHS
        )
    assert code == 0, output
    assert _paths(report) == dict.fromkeys(PATHS, "identical")
    assert report["server"]["paths"]["batch"]["requests"] == len(UNSEEDED)
    assert {(c["request"], c["path"]) for c in report["cases"] if c["scenario"] == "batch"} == {
        ("plain", "batch"),
        ("continued", "batch"),
        ("seeded", "single"),
    }
    assert report["server"]["batch_items"]["items"] == UNSEEDED
    item_jobs = [job for job in engine.jobs if job.conditioning.text == "No seed of its own."]
    assert {job.rng_source for job in item_jobs} == {"deploy"}
    suite = _path_suite(tmp_path / "r")
    assert suite.get("tests") == "5" and suite.get("failures") == "0" and suite.get("skipped") == "0"
    assert _page_paths(report) == [(path, "identical", "pass") for path in PATHS]


def test_a_server_without_the_batch_route_skips_that_path_and_says_why(tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [{"id": "unseeded", "text": "No seed.", "max_new_frames": 3}, {"id": "seeded", "text": "Seed.", "seed": 5}]
    write_rows(requests, rows)
    with serving(Behaviour(moss_headers=True)) as url:
        code, report, output = _audit(url, tmp_path / "named", requests, "--scenarios", "repeat,batch")
        assert code == 2 and "batch, asked for by name: the server has no batch route" in output, output
        # Left to the default set, the path is skipped with the same words and every other one audited.
        code, report, output = _audit(url, tmp_path / "r", requests)
    assert code == 0, output
    batch = report["server"]["paths"]["batch"]
    assert batch["verdict"] == "skipped" and batch["passed"] is None
    assert "no batch route (POST /v1/audio/speech/batch: HTTP 404)" in batch["detail"]
    assert report["server"]["skipped"]["batch"] == batch["detail"]
    assert _paths(report) == {
        "single": "identical",
        "sse": "identical",
        "raw-stream": "identical",
        "batch": "skipped",
        "websocket": "skipped",
    }
    assert "skipped batch: the server has no batch route" in output
    suite = _path_suite(tmp_path / "r")
    assert suite.get("skipped") == "2" and suite.get("failures") == "0"
    assert ("batch", "skipped", "") in _page_paths(report)


@pytest.mark.slow  # a moss serve with the tiny model
def test_moss_serve_passes_on_every_path_bitwise(tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [
        {"id": "u1", "text": "No seed here.", "max_new_frames": 6},
        {"id": "u2", "text": "Another one without a seed.", "max_new_frames": 8},
        {"id": "s1", "text": "Seeded.", "seed": 3, "max_new_frames": 6},
    ]
    write_rows(requests, rows)
    with running(SynthOptions(device="cpu", max_batch=4)) as (url, _):
        code, report, output = _audit(url, tmp_path / "r", requests, "--level", "bitwise", "--scenarios", ALL_PATHS)
    assert code == 0, output
    assert _paths(report) == dict.fromkeys(PATHS, "identical")
    assert report["server"]["batch_items"] == {
        "path": "/v1/audio/speech/batch",
        "items": ["u1", "u2"],
        "single": {"s1": "a batch item cannot carry seed"},
    }
    # moss serve's moss_* keys are read as its headers: its own count of the batch that held the items.
    assert _batch_run(report)["max_in_flight_server"] > 1


def test_a_batch_item_that_fails_is_an_error_naming_its_request_and_the_setting_to_change():
    async def send(url: str) -> None:
        async with SpeechClient(ServerOptions(url=url)) as client:
            items = [{"input": "Fine.", "ref_audio": "file:///voices/a.wav", "max_new_tokens": 2}]
            await client.speak_batch(["the-item"], {"items": items}, "batch/check")

    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        with pytest.raises(ServerError) as raised:
            asyncio.run(send(url))
    message = str(raised.value)
    assert "item 0 ('the-item')" in message and "/v1/audio/speech/batch" in message
    assert "Cannot load local files without `--allowed-local-media-path`" in message
    assert "Start vllm-omni with --allowed-local-media-path DIR" in message
    assert raised.value.request == "the-item" and raised.value.status == 200


def test_the_double_drops_a_batch_items_seed_as_vllm_omni_does():
    # SpeechBatchItem has no seed field (protocol/audio.py:446-463): pydantic drops the key, and the
    # merged request has none (serving_speech.py:2736-2765). After the fix the item gets the deploy seed.
    engine = FakeMossLocalEngine(fixed=True)
    item = {"input": "An item.", "ref_audio": data_url(reference_wav()), "max_new_tokens": 2, "seed": 7}
    with serving_vllm_omni(engine) as url:
        answer = httpx.post(url + "/v1/audio/speech/batch", json={"items": [item]}, timeout=30).json()
    assert answer["succeeded"] == 1 and engine.received_batches[0]["items"][0]["seed"] == 7
    (job,) = engine.jobs
    assert (job.seed, job.rng_source) == (42, "deploy")
