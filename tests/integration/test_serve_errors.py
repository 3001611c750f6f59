"""Bad requests get vllm-omni's error shape naming the field (400 for values, types, fields moss
does not honour and malformed JSON; 413 sizes), `ref_audio` reads only inline data or files inside
--allowed-media-dir, and the server keeps serving afterwards."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import socket
from pathlib import Path

import httpx
import pytest
from serve_helpers import local_synth, pcm_hash, post_speech, running
from websockets.asyncio.client import connect

from moss_cli.pipeline import Synthesizer, SynthOptions
from moss_cli.remote.settings import ServerOptions
from moss_cli.remote.speech_stream import stream_url
from moss_cli.serve.requests import Limits
from moss_cli.speech_api import BATCH_PATH, HEADER_CODES_SHA256, SPEECH_PATH, data_uri

VOICE = Path(__file__).resolve().parents[2] / "examples" / "reference-voice.wav"
GOOD = {"input": "Hello there.", "seed": 1, "max_new_tokens": 12}
REF_LIMIT = 200_000  # the example voice is 96 kB


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("media")
    (folder / "voices").mkdir()
    (folder / "voices" / "voice.wav").write_bytes(VOICE.read_bytes())
    outside = tmp_path_factory.mktemp("outside") / "secret.wav"
    outside.write_bytes(VOICE.read_bytes())
    os.symlink(outside, folder / "voices" / "escape.wav")
    return folder


@pytest.fixture(scope="module")
def server(media):
    options = SynthOptions(device="cpu", max_batch=4)
    limits = Limits.of(Synthesizer(options), ref_audio_bytes=REF_LIMIT)
    with running(options, allowed_media_dir=media, limits=limits) as (url, serving):
        yield url, serving


def _error(response: httpx.Response, status: int, param: str | None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    # A field the request model refuses (its type or range) is vLLM's "Bad Request" naming body.<field>;
    # what moss refuses after that is a BadRequestError naming the field itself.
    expected = f"body.{param}" if error["type"] == "Bad Request" and param else param
    assert error["param"] == expected and error["message"]
    assert error["code"] == status and (status != 400 or error["type"] in ("BadRequestError", "Bad Request"))
    return error["message"]


@pytest.mark.parametrize(
    "change, param",
    [
        ({"top_p": 3}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"language": "Klingon"}, "language"),
        ({"extra_params": {"colour": "red"}}, "extra_params.colour"),
        ({"extra_params": {"tokens": -1}}, "extra_params.tokens"),
        ({"extra_params": {"top_k": 5}}, "extra_params.top_k"),
        ({"extra_params": {"tts_local_seed": "x"}}, "extra_params.tts_local_seed"),
        ({"extra_params": {"tts_local_seed": 4}, "seed": 5}, "extra_params.tts_local_seed"),
        ({"ambient_sound": "rain", "extra_params": {"ambient_sound": "wind"}}, "ambient_sound"),
        ({"colour": "red"}, "colour"),
        ({"speaker": "x"}, "speaker"),
        ({"voice": "alloy"}, "voice"),
        ({"voice": {"name": "x"}}, "voice"),
        ({"response_format": "mp3"}, "response_format"),
        ({"response_format": "aac"}, "response_format"),
        ({"response_format": "flac", "stream": True}, "response_format"),
        ({"response_format": "flac", "stream_format": "audio"}, "response_format"),
        ({"speed": 1.5}, "speed"),
        ({"speed": 5}, "speed"),
        ({"speed": 2.0, "stream": True}, "speed"),
        ({"sample_rate": 24_000}, "sample_rate"),
        ({"sample_rate": 0}, "sample_rate"),
        ({"task_type": "CustomVoice"}, "task_type"),
        ({"task_type": "Clone"}, "task_type"),
        ({"ref_audio": ["data:audio/wav;base64,AA=="]}, "ref_audio"),
        ({"ref_audio_2": "data:audio/wav;base64,AA=="}, "ref_audio_2"),
        ({"duration_seconds": 2.0}, "duration_seconds"),
        ({"x_vector_only_mode": True}, "x_vector_only_mode"),
        ({"speaker_embedding": [0.1, 0.2]}, "speaker_embedding"),
        ({"initial_codec_chunk_frames": 3}, "initial_codec_chunk_frames"),
        ({"non_streaming_mode": False}, "non_streaming_mode"),
        ({"word_timestamps": True}, "word_timestamps"),
        ({"references": [{"audio_path": "a"}, {"audio_path": "b"}]}, "references"),
        ({"references": [{"text": "no audio"}]}, "references"),
        ({"ref_text": "a transcript without audio"}, "ref_text"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -(2**63) - 1}, "seed"),
        ({"input": "   "}, "input"),
        ({"input": "\ud800"}, "input"),
    ],
)
def test_a_bad_value_or_a_field_moss_does_not_honour_is_a_400_naming_it(server, change, param):
    _error(post_speech(server[0], {**GOOD, **change}), 400, param)


def test_an_openai_sampling_field_is_refused_naming_the_field_moss_serve_honours(server):
    said = _error(post_speech(server[0], {**GOOD, "temperature": 0.5}), 400, "temperature")
    assert "in moss (a local run, Ray workers, moss serve) 'audio_temperature' overrides the audio sampler" in said
    assert "for a local run" not in said
    assert post_speech(server[0], {**GOOD, "audio_temperature": 0}).status_code == 200


@pytest.mark.parametrize(
    "body, param",
    [
        ({**GOOD, "seed": "x"}, "seed"),
        ({**GOOD, "seed": 1.5}, "seed"),
        ({**GOOD, "stream": "maybe"}, "stream"),
        ({**GOOD, "stream": None}, "stream"),  # not optional in vllm-omni's model either
        ({**GOOD, "response_format": None}, "response_format"),
        ({**GOOD, "ref_audio": 5}, "ref_audio"),
        ({**GOOD, "extra_params": [1]}, "extra_params"),
        ({"seed": 1}, "input"),
        ([GOOD], None),
    ],
)
def test_a_wrong_type_is_a_400_naming_its_field_as_in_vllm_omni(server, body, param):
    _error(post_speech(server[0], body), 400, param)


@pytest.mark.parametrize(
    "change, seed",
    [
        ({"seed": "5"}, "5"),  # vllm-omni's types coerce as pydantic does: this is seed 5
        ({"seed": 5.0}, "5"),
        ({"extra_params": {"tts_local_seed": 6}, "seed": None}, "6"),  # the residual sampler's seed in vllm-omni
        ({"extra_params": {"tts_local_seed": 6}, "seed": 6}, "6"),
        ({"speed": 1.0, "sample_rate": 48_000, "voice": "Default", "task_type": "Base"}, "1"),
        ({"speaker": {"id": "default"}, "x_vector_only_mode": False, "word_timestamps": False}, "1"),
        ({"model": "", "stream": False, "stream_format": None, "ref_audio": None, "references": None}, "1"),
    ],
)
def test_values_vllm_omni_takes_at_their_meaning_are_taken(server, change, seed):
    response = post_speech(server[0], {**GOOD, **change})
    assert response.status_code == 200, response.text
    assert response.headers["x-moss-seed"] == seed


def test_malformed_json_another_content_type_and_invalid_utf8_are_400s(server):
    url = server[0] + SPEECH_PATH
    response = httpx.post(url, content=b'{"input": "x",', headers={"content-type": "application/json"}, timeout=10)
    assert "not valid JSON" in _error(response, 400, None)
    response = httpx.post(url, content=b'{"input": "\xff"}', headers={"content-type": "application/json"}, timeout=10)
    _error(response, 400, None)
    response = httpx.post(url, content=b'{"input": "x"}', headers={"content-type": "text/plain"}, timeout=10)
    assert "application/json" in _error(response, 400, None)


def test_a_body_nested_past_the_recursion_limit_is_a_400_without_a_traceback(server, caplog):
    deep = b"[" * 100_000 + b"]" * 100_000
    caplog.set_level(logging.DEBUG)
    for path in (SPEECH_PATH, BATCH_PATH):
        response = httpx.post(server[0] + path, content=deep, headers={"content-type": "application/json"}, timeout=10)
        assert "not valid JSON (nested too deeply)" in _error(response, 400, None), path

    async def message() -> dict:
        async with connect(stream_url(ServerOptions(server[0])), open_timeout=10, max_size=None) as socket_:
            await socket_.send(deep.decode())
            return json.loads(await socket_.recv())

    assert asyncio.run(message()) == {"type": "error", "message": "Invalid JSON message"}
    assert not [r for r in caplog.records if "RecursionError" in r.getMessage() or r.exc_info]


def test_an_unknown_model_is_a_404_and_unknown_routes_a_plain_404_in_the_error_shape(server):
    response = post_speech(server[0], {**GOOD, "model": "tts-1"})
    _error(response, 404, "model")
    assert (response.json()["error"]["type"], response.json()["error"]["code"]) == ("NotFoundError", 404)
    response = httpx.get(server[0] + "/v1/nothing", timeout=5)
    assert _error(response, 404, None) == "no such path: /v1/nothing"
    assert response.json()["error"]["code"] == 404


@pytest.mark.parametrize(
    "change, param, words, file_words",
    [
        ({"input": "   "}, "input", "'input' is empty", "'text'"),
        ({"max_new_tokens": 2_000_000}, "max_new_tokens", "'max_new_tokens' must be an integer", "'max_new_frames'"),
        ({"extra_params": {"tokens": -1}}, "extra_params.tokens", "'extra_params.tokens'", " 'tokens'"),
    ],
)
def test_messages_name_the_bodys_fields_not_the_request_files(server, change, param, words, file_words):
    message = _error(post_speech(server[0], {**GOOD, **change}), 400, param)
    assert words in message and file_words not in message


def test_a_text_longer_than_the_model_can_hold_is_a_413(server):
    too_long = server[1].intake.limits.text_bytes + 1
    _error(post_speech(server[0], {**GOOD, "input": "a" * too_long}), 413, "input")


def test_a_body_over_the_limit_is_a_413_whether_declared_or_streamed(server):
    url, serving = server
    limit = serving.intake.limits.body_bytes
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=10) as sock:  # declared: refused unread
        sock.sendall(
            f"POST {SPEECH_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {limit + 1}\r\n\r\n".encode()
        )
        assert sock.recv(1024).startswith(b"HTTP/1.1 413")

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"input": "'
        for _ in range(limit // 65536 + 2):
            yield b"a" * 65536
        yield b'"}'

    response = httpx.post(url + SPEECH_PATH, content=chunks(), headers={"content-type": "application/json"}, timeout=30)
    _error(response, 413, None)


def test_reference_paths_are_refused_outside_the_allowed_folder(server, media):
    url = server[0]
    assert "allowed-media-dir" in _error(post_speech(url, {**GOOD, "ref_audio": str(VOICE)}), 400, "ref_audio")
    for escape in ("../outside/secret.wav", "voices/escape.wav", "voices/../../x.wav", "voices/missing.wav"):
        _error(post_speech(url, {**GOOD, "ref_audio": escape}), 400, "ref_audio")
    for url_ref in ("http://127.0.0.1:1/voice.wav", "https://example.com/voice.wav"):
        assert "never fetches" in _error(post_speech(url, {**GOOD, "ref_audio": url_ref}), 400, "ref_audio")
    _error(post_speech(url, {**GOOD, "ref_audio": "data:audio/wav;base64,!!!"}), 400, "ref_audio")
    not_audio = "data:audio/wav;base64,UklGRjAwMDBXQVZF"  # base64 fine, but no audio in it
    _error(post_speech(url, {**GOOD, "ref_audio": not_audio}), 400, "ref_audio")
    big = "data:audio/wav;base64," + base64.b64encode(b"\0" * (REF_LIMIT + 10)).decode()
    _error(post_speech(url, {**GOOD, "ref_audio": big}), 413, "ref_audio")


def test_reference_voices_inline_or_allowed_clone_exactly_as_moss_synth(server, media, tmp_path):
    url, serving = server
    record = {"id": "voice", "text": "Hello there.", "seed": 1, "max_new_frames": 12, "ref_audio": str(VOICE)}
    local = local_synth([record], tmp_path)["voice"]
    for ref in (data_uri(VOICE), "voices/voice.wav", f"file://{media / 'voices' / 'voice.wav'}"):
        response = post_speech(url, {**GOOD, "ref_audio": ref})
        assert response.status_code == 200, response.text
        assert pcm_hash(response.content, "wav") == local["pcm_sha256"], ref
        assert response.headers[HEADER_CODES_SHA256] == local["codes_sha256"]
    assert list(serving.intake.folder.iterdir()) == []  # private copies removed once done
    assert serving.synth.voices._read == {}  # and the voices forgotten


def test_the_server_still_serves_after_every_bad_request(server):
    url = server[0]
    for bad in ({"top_p": 9}, {"seed": "x"}, {"ref_audio": "/etc/passwd"}):
        assert post_speech(url, {**GOOD, **bad}).status_code == 400
    assert httpx.get(url + "/health", timeout=5).status_code == 200
    assert post_speech(url, GOOD).status_code == 200
