"""`moss serve`'s WebSocket speech stream: each utterance is a request of the live engine, bitwise the
audio of the same body sent by POST (an unseeded one takes the deploy seed), on any connection."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from serve_helpers import pcm_of, post_speech, running  # tests/ is on sys.path

from moss_cli.pipeline import SynthOptions
from moss_cli.remote.client import ServerError
from moss_cli.remote.settings import ServerOptions
from moss_cli.remote.speech_stream import SpeechStream
from moss_cli.speech_api import session_config

TEXT = "Hello, and welcome to the reproducibility lab."
CHUNKS = ["Hello, and wel", "come to the reproduci", "bility lab."]


@pytest.fixture(scope="module")
def server():
    with running(SynthOptions(device="cpu", max_batch=4)) as (url, serving):
        yield url


def stream(url: str, body: dict, *texts: list[str], **session: object) -> list:
    config, lacks = session_config(body)
    assert not lacks
    config.update(session)  # fields of the session alone

    async def go():
        async with SpeechStream(ServerOptions(url, timeout_s=60), config) as session:
            return [await session.speak(f"u{i}", chunks) for i, chunks in enumerate(texts)]

    return asyncio.run(go())


@pytest.mark.parametrize("seed", [None, 7])
def test_an_utterance_is_the_post_of_the_same_body_and_a_second_one_a_fresh_connection(server, seed):
    body = {"input": TEXT, "max_new_tokens": 20, "response_format": "wav", **({"seed": seed} if seed else {})}
    first, second = stream(server, body, CHUNKS, [TEXT])
    posted = post_speech(server, body, expect=200)
    assert np.array_equal(first.pcm, pcm_of(posted.content, "wav"))
    assert np.array_equal(second.pcm, first.pcm)
    assert first.seed_source == posted.headers["x-moss-seed-source"] == ("request" if seed else "deploy")
    assert first.seed == int(posted.headers["x-moss-seed"]) and first.frames == int(posted.headers["x-moss-frames"])


def test_streamed_pcm_equals_the_file(server):
    body = {"input": TEXT, "max_new_tokens": 20, "seed": 3, "response_format": "pcm"}
    [whole] = stream(server, body, CHUNKS)
    [streamed] = stream(server, body, CHUNKS, stream_audio=True)
    assert np.array_equal(streamed.pcm, whole.pcm) and len(whole.pcm) > 0


def test_a_refused_field_is_an_error_naming_the_utterance(server):
    with pytest.raises(ServerError, match=r"utterance 'u0' .*Invalid session config: not session.config fields: bogus"):
        stream(server, {"input": TEXT}, CHUNKS, bogus=1)
    with pytest.raises(ServerError, match=r"utterance 'u0' .*Generation failed for utterance 0, sentence 0: .*"):
        stream(server, {"input": TEXT, "word_timestamps": True}, CHUNKS)
