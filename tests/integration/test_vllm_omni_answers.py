"""What vllm-omni 0.30.0's serving code answers where a request is refused, and how moss's clients
read it: a `file://` ref_audio on a server started without `--allowed-local-media-path` (a 500 that
no re-send changes: a setting of the server), and vLLM's schema error (a dump of pydantic's
errors). moss itself sends a request file's reference inline, `file://` URIs included."""

import asyncio
from pathlib import Path

import pytest
import soundfile as sf
from cli_runs import write_rows
from speech_servers import Behaviour, serving  # tests/ is on sys.path
from typer.testing import CliRunner
from vllm_omni_server import FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni

from moss_cli.cli.app import app
from moss_cli.io.reference_audio import synthetic_voice
from moss_cli.remote.client import ServerError, SpeechClient
from moss_cli.remote.settings import ServerOptions
from moss_cli.speech_api import data_uri

runner = CliRunner()
LOCAL_FILES = "Cannot load local files without `--allowed-local-media-path`."
# vllm-omni's answer to it on the single route (serving_speech.py:2720-2733)
LOCAL_FILES_500 = {"message": f"Speech generation failed: {LOCAL_FILES}", "type": "InternalServerError", "param": None}


def _speak(url: str, body: dict, retries: int = 3) -> tuple[SpeechClient, ServerError | None]:
    async def run():
        async with SpeechClient(ServerOptions(url, retries=retries, timeout_s=60)) as client:
            try:
                await client.speak("r1", body, "synth")
            except ServerError as e:
                return client, e
            return client, None

    return asyncio.run(run())


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _voice(tmp_path: Path) -> Path:
    path = tmp_path / "voice.wav"
    sf.write(str(path), synthetic_voice(1.5, 22_050, 190.0), 22_050, subtype="PCM_16")
    return path


def _requests(tmp_path: Path, **fields) -> Path:
    rows = [{"id": f"r{i}", "text": f"Request number {i}.", "seed": i, "max_new_frames": 3, **fields} for i in (1, 2)]
    return write_rows(tmp_path / "r.jsonl", rows)


def test_a_file_uri_without_the_servers_option_is_a_setting_to_change_and_is_not_re_sent():
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        client, error = _speak(url, {"input": "Hello.", "ref_audio": "file:///srv/voices/a.wav", "max_new_tokens": 2})
    assert error is not None and error.status == 500 and error.request == "r1"
    message = str(error)
    assert f"HTTP 500 Internal Server Error: Speech generation failed: {LOCAL_FILES[:-1]}. That is a setting" in message
    assert "Start vllm-omni with --allowed-local-media-path DIR" in message and "data: URL" in message
    assert client.sent == 1 and not client.retries and len(engine.received) == 1  # a 500, and still not re-sent


@pytest.mark.parametrize("command", ["synth", "audit-determinism"])
def test_synth_and_the_audit_report_the_refusal_as_a_server_setting_exit_2_and_send_once(tmp_path, command):
    behaviour = Behaviour(status=500, error=LOCAL_FILES_500)
    requests = _requests(tmp_path)
    with serving(behaviour) as url:
        if command == "synth":
            args = ["synth", str(requests), "--out", str(tmp_path / "out")]
        else:
            args = ["audit-determinism", str(requests), "--json", str(tmp_path / "audit.json")]
        result = runner.invoke(app, [*args, "--server", url, "--retries", "3"])
    output = _one_line(result.output)
    assert result.exit_code == 2, output
    assert "Traceback" not in result.output and "sending it again" not in output
    assert "request '" in output and LOCAL_FILES[:-1] in output
    assert "That is a setting of the server" in output and "--allowed-local-media-path DIR" in output
    # Each request at most once: the audit stops at its first request (the reference-voice check).
    assert len(behaviour.seen) == (2 if command == "synth" else 1), behaviour.seen
    assert not (tmp_path / "out").exists()


def test_a_file_uri_in_a_request_file_is_sent_inline_so_the_server_needs_no_local_files(tmp_path):
    voice = _voice(tmp_path)
    requests = _requests(tmp_path, ref_audio=voice.as_uri())
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        result = runner.invoke(app, ["synth", str(requests), "--out", str(tmp_path / "out"), "--server", url])
    assert result.exit_code == 0, result.output
    assert [body["ref_audio"] for body in engine.received] == [data_uri(voice)] * 2
    assert len(list((tmp_path / "out").glob("*.wav"))) == 2


def test_vllm_omnis_schema_error_is_read_as_the_field_and_pydantic_message():
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        _, error = _speak(url, {"input": "Hello.", "ref_audio": data_url(reference_wav()), "seed": "x"})
    assert error is not None and error.status == 400
    expected = "HTTP 400 Bad Request: seed: Input should be a valid integer, unable to parse string as an integer"
    assert f"{expected} [body.seed]" in str(error) and "validation error" not in str(error)


def test_vllms_own_schema_error_with_its_raw_locations_is_read_the_same_way():
    """vLLM's handler (handlers/validation.py) writes each error as pydantic gives it, `loc` a tuple."""
    lines = [
        "2 validation errors:",
        "  {'type': 'int_parsing', 'loc': ('body', 'seed'), 'msg': 'Input should be a valid integer', 'input': 'x'}",
        "  {'type': 'missing', 'loc': ('body', 'input'), 'msg': 'Field required', 'input': {'seed': 'x'}}",
    ]
    error = {"message": "\n".join(lines), "type": "Bad Request", "param": "body.seed"}
    with serving(Behaviour(status=400, error=error)) as url:
        _, refused = _speak(url, {"input": "Hello."})
    assert "HTTP 400 Bad Request: seed: Input should be a valid integer; input: Field required [body.seed]" in str(
        refused
    )


def test_a_batch_item_refused_for_the_setting_names_its_request_and_what_to_change():
    """vllm-omni answers the batch 200 and that item `status: "error"` with vLLM's words
    (serving_speech.py:2790-2802); the client names the item, its request and the setting."""
    items = [
        {"input": "One.", "ref_audio": data_url(reference_wav()), "max_new_tokens": 2},
        {"input": "Two.", "ref_audio": "file:///srv/voices/a.wav", "max_new_tokens": 2},
    ]
    engine = FakeMossLocalEngine(fixed=True)

    async def run(url: str):
        async with SpeechClient(ServerOptions(url, retries=3, timeout_s=60)) as client:
            with pytest.raises(ServerError) as refused:
                await client.speak_batch(["one", "two"], {"items": items}, "batch")
            return client, refused.value

    with serving_vllm_omni(engine) as url:
        client, error = asyncio.run(run(url))
    message = _one_line(str(error))
    assert error.request == "two" and f"item 1 ('two'): {LOCAL_FILES[:-1]}. That is a setting of the server" in message
    assert "--allowed-local-media-path DIR" in message
    assert client.sent == 1 and len(engine.received_batches) == 1


@pytest.mark.parametrize("response_format", ["wav", "pcm"])
def test_a_raw_stream_with_no_audio_is_an_empty_answer_like_the_other_routes(response_format):
    """vllm-omni writes a raw stream's WAV header together with its first audio chunk
    (serving_speech.py:1666-1691), so a request whose stop gate fires at its first frame answers 200
    with an empty body. That is no audio, not a broken answer, as the single route and SSE say too."""
    bodies = {
        "single": {},
        "sse": {"stream": True},
        "raw-stream": {"stream_format": "audio"},
    }
    request = {"input": "Yes.", "ref_audio": data_url(reference_wav()), "seed": 34, "response_format": response_format}
    engine = FakeMossLocalEngine(fixed=True, min_frames=0)  # its gate may fire at the first frame

    async def run(url: str):
        async with SpeechClient(ServerOptions(url, retries=0, timeout_s=60)) as client:
            return {path: await client.speak(path, {**request, **extra}, "synth") for path, extra in bodies.items()}

    with serving_vllm_omni(engine) as url:
        replies = asyncio.run(run(url))
    assert [job.frames for job in engine.jobs] == [0, 0, 0]  # seed 34: "Yes." stops before its first frame
    assert {path: reply.pcm.shape[0] for path, reply in replies.items()} == dict.fromkeys(bodies, 0)
    assert len({reply.pcm_sha256 for reply in replies.values()}) == 1
