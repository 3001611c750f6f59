"""`moss audit-determinism --server`, the WebSocket speech stream (`/v1/audio/speech/stream`): each
utterance goes as a voice agent sends it (session.config with the request's fields, its text in
chunks, input.done), on a connection of its own, then in turn on one reused connection, then in
sessions at once next to HTTP traffic. With split_granularity "none" the utterance is the single
route's request (serving_speech_stream.py:311-330, 382-386), so each is compared with the request
sent alone. Before the deploy-seed fix the unseeded utterances fail `deploy-seed-not-applied`, after
it every one is identical; a server without the handler skips the path and says why."""

import asyncio
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import soundfile as sf
from cli_runs import AuditRun, moss_audit, write_rows  # tests/ is on sys.path
from speech_servers import Behaviour, serving
from vllm_omni_server import FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni

from moss_cli.config.requests import Request
from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.remote import paths
from moss_cli.remote.client import SpeechClient
from moss_cli.remote.settings import ServerOptions
from moss_cli.remote.speech_stream import SpeechStream, text_chunks
from moss_cli.speech_api import body_from_request, session_config, session_lacks

DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42
RUNS = [
    "websocket/each-utterance-on-a-connection-of-its-own",
    "websocket/every-utterance-in-turn-on-one-connection",
    "websocket/3-sessions-at-once-with-3-http-requests",
]


def _requests(folder: Path) -> Path:
    """Two unseeded requests and a seeded one that an utterance carries, and one it cannot (its text
    starts with a space, which the handler strips): it goes as a single request beside the sessions."""
    sf.write(str(folder / "voice.wav"), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    rows = [
        {"id": "plain", "text": "No seed of its own, said in pieces.", "ref_audio": "voice.wav", "max_new_frames": 8},
        {"id": "other", "text": "Another one without a seed.", "ref_audio": "voice.wav", "max_new_frames": 6},
        {"id": "seeded", "text": "A seed of its own.", "ref_audio": "voice.wav", "seed": 7, "max_new_frames": 6},
        {"id": "continued", "text": " and on it goes.", "ref_audio": "voice.wav", "ref_text": "It starts"},
    ]
    return write_rows(folder / "requests.jsonl", rows)


def _audit(url: str, tmp_path: Path, *args) -> AuditRun:
    folder = tmp_path / "r"
    folder.mkdir()
    return moss_audit(
        *args, f"--junit={folder / 'junit.xml'}", server=url, stagger_ms=5, report=folder / "a.json", flat_output=True
    )


def _audit_websocket(tmp_path: Path, engine: FakeMossLocalEngine, **app_options) -> AuditRun:
    """The repeat and websocket scenarios of the audit against the double, with --deploy."""
    with serving_vllm_omni(engine, **app_options) as url:
        return _audit(url, tmp_path, _requests(tmp_path), "--deploy", DEPLOY, "--scenarios", "repeat,websocket")


def _websocket_case(folder: Path) -> ET.Element:
    suite = next(s for s in ET.parse(folder / "junit.xml").getroot() if s.get("name") == "audit.paths")
    return next(c for c in suite if c.get("name") == "websocket")


def test_before_the_fix_the_unseeded_utterances_fail_deploy_seed_not_applied(tmp_path):
    engine = FakeMossLocalEngine(fixed=False)
    code, report, output = _audit_websocket(tmp_path, engine)
    assert code == 1, output
    websocket = report["server"]["paths"]["websocket"]
    assert websocket["verdict"] == "deploy-seed-not-applied"
    assert websocket["failed"] == {"plain": "deploy-seed-not-applied", "other": "deploy-seed-not-applied"}
    assert websocket["requests"] == 3  # plain, other, seeded: the seeded one holds
    assert report["server"]["websocket"] == {
        "path": "/v1/audio/speech/stream",
        "utterances": ["plain", "other", "seeded"],
        "single": {"continued": "an utterance cannot carry input with whitespace at either end"},
    }
    assert [label for label in report["server"]["runs"] if label.startswith("websocket/")] == RUNS
    seeded = [c for c in report["cases"] if c["request"] == "seeded" and c["scenario"] == "websocket"]
    assert len(seeded) == 3 and {c["verdict"] for c in seeded} == {"pass"}
    assert {c["path"] for c in report["cases"] if c["scenario"] == "websocket" and c["request"] == "continued"} == {
        "single"
    }
    # 1 check, then 3 utterances in each of the 3 runs.
    assert report["server"]["websocket_utterances"] == 10
    failure = _websocket_case(tmp_path / "r").find("failure")
    assert failure is not None and failure.get("type") == "deploy-seed-not-applied"
    assert "| `websocket` | WebSocket /v1/audio/speech/stream" not in output  # terminal: no Markdown
    assert "websocket" in output and "deploy-seed-not-applied" in output


def test_after_the_fix_every_utterance_is_the_request_alone_on_a_fresh_or_reused_connection(tmp_path):
    engine = FakeMossLocalEngine(fixed=True)
    code, report, output = _audit_websocket(tmp_path, engine)
    assert code == 0, output
    assert report["server"]["paths"]["websocket"]["verdict"] == "identical"
    reused = [c for c in report["cases"] if c["run"] == "every-utterance-in-turn-on-one-connection"]
    assert {c["request"] for c in reused} == {"plain", "other", "seeded"}
    assert all(c["verdict"] == "pass" and c["comparison"]["pcm_equal"] for c in reused)
    together = report["server"]["runs"][RUNS[2]]
    assert together["max_in_flight_client"] == 6  # three sessions, the single request and two neighbours
    # The utterances reached the engine as the single route's requests: same text, seed and budget.
    said = [r for r in engine.requests if r.input == "No seed of its own, said in pieces."]
    assert len(said) == 1 + 1 + 3 and {(r.seed, r.max_new_tokens) for r in said} == {(None, 8)}
    assert _websocket_case(tmp_path / "r").find("failure") is None


def test_a_deploy_without_the_streaming_handler_is_named_in_its_words(tmp_path):
    """The websocket scenario asked for by name: its absence is exit 2 in vllm-omni's words, after the
    report of the repeat (the default set skips it in the same words: test_server_audit_upgrade.py)."""
    code, report, output = _audit_websocket(tmp_path, FakeMossLocalEngine(fixed=True), streaming_speech_available=False)
    assert code == 2, output
    said = "the server does not serve the WebSocket stream (/v1/audio/speech/stream): Streaming speech is not available"
    assert f"websocket, asked for by name: {said}" in output
    websocket = report["server"]["paths"]["websocket"]
    assert websocket["verdict"] == "not audited" and said in websocket["detail"]
    assert report["summary"]["incomplete"]["not_run"] == ["websocket"]
    assert report["server"]["paths"]["single"]["verdict"] == "identical"


def test_a_server_without_the_route_is_refused_the_scenario_asked_for(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "u", "text": "No seed.", "max_new_frames": 3}])
    with serving(Behaviour(moss_headers=True)) as url:
        code, report, output = _audit(url, tmp_path, requests, "--scenarios", "repeat,websocket")
    assert code == 2, output
    assert "to the WebSocket upgrade: the server has no /v1/audio/speech/stream" in output
    assert report["summary"]["scenarios"] == {"repeat": {"pass": 1}}


def test_text_chunks_join_to_the_text_and_cut_between_words():
    for text in ("Yes.", "A longer sentence, so that this request is still running.", "two  spaces here", ""):
        chunks = text_chunks(text)
        assert "".join(chunks) == text and len(chunks) <= 3
    assert text_chunks("one two three four five six") == ["one two ", "three four ", "five six"]


def test_what_an_utterance_cannot_carry():
    plain = Request(id="a", text="Fine.", line=1)
    assert session_lacks(plain) == []
    assert session_lacks(Request(id="b", text=" padded", line=2)) == ["input with whitespace at either end"]
    sampled = Request(id="c", text="x", line=3, sampling={"audio_temperature": 0.5})
    assert session_lacks(sampled) == ["audio_temperature"]
    # What it carries is the single route's body, field for field, the seed included (0 too).
    body = body_from_request(Request(id="d", text="x", line=4, seed=0, max_new_frames=5), model="m")
    config, lacks = session_config(body)
    assert lacks == [] and {k: config[k] for k in ("seed", "max_new_tokens", "model")} == {
        "seed": 0,
        "max_new_tokens": 5,
        "model": "m",
    }


def test_each_path_marks_a_body_its_own_way():
    body = {"input": "x", "response_format": "flac"}
    assert paths.SINGLE.body(body) == body
    assert paths.SSE.body(body) == {"input": "x", "response_format": "wav", "stream": True}
    assert paths.RAW_STREAM.body({**body, "response_format": "pcm"}) == {
        "input": "x",
        "response_format": "pcm",
        "stream_format": "audio",
    }
    assert [p.name for p in paths.PATHS.values()] == ["single", "sse", "raw-stream", "batch", "websocket"]
    assert {p.scenario for p in paths.PATHS.values()} == {None, "streaming", "raw-stream", "batch", "websocket"}


def test_a_second_utterance_on_one_connection_equals_it_on_a_fresh_one():
    """Through `remote.paths`, as the audit and the bench send: the same request on a reused session
    (after another request's config) gives the bytes it gives on a session of its own."""
    voice = {"ref_audio": data_url(reference_wav())}  # the double, as vllm-omni's MOSS-TTS-Local, requires one
    body = body_from_request(Request(id="s", text="Seeded and reused.", line=1, seed=11, max_new_frames=6)) | voice
    other = body_from_request(Request(id="o", text="Something else first.", line=2, max_new_frames=4)) | voice

    async def speak(url: str):
        async with SpeechClient(ServerOptions(url=url)) as client:
            fresh = await paths.WEBSOCKET.speak(client, "s", body, "fresh")
            async with SpeechStream(client.options, session_config(other)[0], "reused") as stream:
                await paths.utter(client, stream, "o", other)
                reused = await paths.utter(client, stream, "s", body)
            single = await paths.SINGLE.speak(client, "s", body, "single")
            return fresh, reused, single, client.utterances

    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        fresh, reused, single, utterances = asyncio.run(speak(url))
    assert fresh.pcm_sha256 == reused.pcm_sha256 == single.pcm_sha256
    assert utterances == 3


@pytest.mark.parametrize("path", [paths.BATCH])
def test_the_batch_route_is_not_spoken_one_request_at_a_time(path):
    with pytest.raises(ValueError, match="not one by one"):
        asyncio.run(path.speak(None, "x", {"input": "x"}, "ctx"))
