"""The WebSocket speech stream (`/v1/audio/speech/stream`): the vllm-omni double serves it as the 0.30.0
wheel does, and moss's client (moss_cli/remote/speech_stream.py) reads it into the HTTP client's Reply."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import numpy as np
import pytest
import websockets
from vllm_omni_server import FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni  # tests/ on sys.path

from moss_cli.remote.client import ServerError
from moss_cli.remote.reply import decode_audio
from moss_cli.remote.settings import ServerOptions
from moss_cli.remote.speech_stream import SpeechStream, StreamUnavailable, stream_url
from moss_cli.speech_api import session_config

REF = data_url(reference_wav())
TEXT = "Hello there, this is a test."
CHUNKS = ["Hello the", "re, this is", " a test."]
BODY = {"input": TEXT, "ref_audio": REF, "max_new_tokens": 6, "response_format": "wav"}


@pytest.fixture(scope="module")
def before():
    engine = FakeMossLocalEngine(fixed=False)
    with serving_vllm_omni(engine) as url:
        yield url


@pytest.fixture(scope="module")
def after():
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        yield url


def options(url: str) -> ServerOptions:
    return ServerOptions(url, timeout_s=20)


def config(**fields: Any) -> dict:
    return {**session_config(BODY)[0], **fields}


def utterances(url: str, settings: dict, *texts: list[str]) -> list:
    async def go():
        async with SpeechStream(options(url), settings) as stream:
            return [await stream.speak(f"u{i}", chunks) for i, chunks in enumerate(texts)]

    return asyncio.run(go())


def post(url: str, **fields: Any) -> np.ndarray:
    response = httpx.post(f"{url}/v1/audio/speech", json={**BODY, **fields}, trust_env=False, timeout=20)
    assert response.status_code == 200, response.text
    return decode_audio(response.content, "wav", "audio/wav", sample_rate=48_000, channels=2)[0]


def raw_session(url: str, messages: list[Any], answers: int) -> list:
    """Send messages as they are (dicts as JSON, str and bytes raw); read up to `answers` replies or the close."""

    async def go():
        got = []
        async with websockets.connect(stream_url(options(url)), max_size=None, proxy=None) as ws:
            for message in messages:
                await ws.send(json.dumps(message) if isinstance(message, dict) else message)
            try:
                for _ in range(answers):
                    answer = await asyncio.wait_for(ws.recv(), 10)
                    got.append(json.loads(answer) if isinstance(answer, str) else answer)
            except websockets.ConnectionClosed:
                got.append("closed")
        return got

    return asyncio.run(go())


def test_the_session_config_model_maps_onto_the_request_it_generates():
    built, lacks = session_config({**BODY, "seed": 3, "extra_params": {"x": 1}, "audio_temperature": 0.5})
    assert built == {
        "type": "session.config",
        "split_granularity": "none",
        **{k: v for k, v in BODY.items() if k != "input"},
        "seed": 3,
    }
    assert lacks == ["extra_params", "audio_temperature"]


def test_an_unseeded_utterance_differs_alone_before_the_fix_and_a_seeded_one_is_stable(before):
    first, second = (utterances(before, config(), CHUNKS)[0].pcm for _ in range(2))
    assert not np.array_equal(first, second)
    seeded = [utterances(before, config(seed=9), CHUNKS)[0].pcm for _ in range(2)]
    assert np.array_equal(*seeded)
    assert np.array_equal(seeded[0], post(before, seed=9))  # the POST with the same fields


def test_an_unseeded_utterance_takes_the_deploy_seed_after_the_fix_as_the_post_does(after):
    [reply] = utterances(after, config(), CHUNKS)
    assert reply.sample_rate == 48_000 and reply.channels == 2 and len(reply.pcm) > 0
    assert np.array_equal(reply.pcm, post(after))
    assert np.array_equal(reply.pcm, post(after, seed=42))


def test_chunked_text_equals_the_whole_and_a_second_utterance_a_fresh_connection(after):
    chunked, again = utterances(after, config(seed=4), CHUNKS, CHUNKS)
    [whole] = utterances(after, config(seed=4), [TEXT])
    assert np.array_equal(chunked.pcm, whole.pcm) and np.array_equal(again.pcm, whole.pcm)
    assert chunked.arrivals and again.wall_s > 0


def test_streamed_pcm_equals_the_file(after):
    [streamed] = utterances(after, config(seed=4, response_format="pcm", stream_audio=True), CHUNKS)
    [whole] = utterances(after, config(seed=4), CHUNKS)
    assert np.array_equal(streamed.pcm, whole.pcm)
    assert len(streamed.arrivals) > 1  # chunk by chunk


def test_a_generation_error_names_the_request_and_the_session_goes_on(after):
    settings = config(seed=4)
    del settings["ref_audio"]

    async def go():
        async with SpeechStream(options(after), settings) as stream:
            with pytest.raises(
                ServerError, match=r"utterance 'u0' .*Generation failed for utterance 0, sentence 0: .*ref_audio"
            ):
                await stream.speak("u0", CHUNKS)
            with pytest.raises(ServerError, match="utterance 1"):
                await stream.speak("u1", CHUNKS)

    asyncio.run(go())


@pytest.mark.parametrize(
    "messages, expected",
    [
        ([{"type": "input.text", "text": "hi"}], ["Expected session.config, got: input.text", "closed"]),
        (["not json"], ["Invalid JSON message", "closed"]),
        (["[1]"], ["WebSocket messages must be JSON objects", "closed"]),
        ([{"type": "session.config", "speed": 9}], ["Invalid session config: 1 validation error", "closed"]),
        ([{"type": "session.config", "stream_audio": True}], ["Invalid session config: 1 validation error", "closed"]),
        (
            [{"type": "session.config", "model": "other"}],
            ["error=ErrorInfo(message='The model `other` does not exist.'", "closed"],
        ),
        ([{"type": "session.config"}, {"type": "bogus"}], ["Unknown message type: bogus"]),
        ([{"type": "session.config"}, {"type": "input.text", "text": 5}], ["input.text requires a string value"]),
        (
            [{"type": "session.config"}, {"type": "input.text", "text": "x" * (128 * 1024)}],
            ["input.text message too large"],
        ),
        (
            [{"type": "session.config"}, {"type": "input.text", "text": "a"}, {"type": "session.config"}],
            ["session.config cannot be applied while an utterance is in progress"],
        ),
        ([{"type": "session.config"}, b"\x00"], ["Internal error: 'text'"]),
    ],
)
def test_errors_as_the_wheel_sends_them(after, messages, expected):
    got = raw_session(after, messages, len(expected))
    for answer, words in zip(got, expected):
        if words == "closed":
            assert answer == "closed"
        else:
            assert answer["type"] == "error" and answer["message"].startswith(words), answer


def test_an_empty_utterance_is_no_request(after):
    got = raw_session(
        after, [{"type": "session.config"}, {"type": "input.text", "text": "  "}, {"type": "input.done"}], 1
    )
    assert got == [{"type": "session.done", "utterance_index": 0, "total_sentences": 0}]


def test_a_server_without_the_handler_or_the_route_is_unavailable():
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True), streaming_speech_available=False) as url:
        with pytest.raises(StreamUnavailable) as raised:
            utterances(url, config(), CHUNKS)
    assert raised.value.reason == "Streaming speech is not available"
    from speech_servers import Behaviour, serving  # an HTTP-only speech server

    with serving(Behaviour()) as url:
        with pytest.raises(StreamUnavailable, match="HTTP 40[34] (Forbidden|Not Found) to the WebSocket upgrade"):
            utterances(url, config(), CHUNKS)
