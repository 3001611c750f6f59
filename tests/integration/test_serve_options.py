"""`moss serve` with the options `moss synth` takes: a deploy without a seed, the legacy global RNG
(the negative control), the fast numerics; and an engine failure costs only its own requests."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import pcm_hash, post_speech, running, sse_events

from moss_cli.numerics import Numerics
from moss_cli.pipeline import SynthOptions
from moss_cli.speech_api import HEADER_FRAMES, HEADER_MAX_IN_FLIGHT, HEADER_SEED, HEADER_SEED_SOURCE

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
TEXTS = ["Hello there, how are you?", "The rain in Spain.", "One, two, three, four.", "A quiet evening."]


def _together(url: str, bodies: list[dict]) -> list[httpx.Response]:
    with ThreadPoolExecutor(len(bodies)) as pool:
        return list(pool.map(lambda b: post_speech(url, b, expect=200), bodies))


def test_a_deploy_without_a_seed_leaves_unseeded_requests_without_one():
    with running(SynthOptions(device="cpu", deploy=RECIPES / "moss_tts_local_tiny_unseeded.yaml")) as (url, _):
        headers = post_speech(url, {"input": TEXTS[0], "max_new_tokens": 10}, expect=200).headers
        assert (headers[HEADER_SEED], headers[HEADER_SEED_SOURCE]) == ("none", "none")
        headers = post_speech(url, {"input": TEXTS[0], "max_new_tokens": 10, "seed": 0}, expect=200).headers
        assert (headers[HEADER_SEED], headers[HEADER_SEED_SOURCE]) == ("0", "request")


def test_the_legacy_global_rng_repeats_a_request_alone_but_not_among_others():
    bodies = [{"input": text, "seed": 9, "max_new_tokens": 40} for text in TEXTS]
    with running(SynthOptions(device="cpu", legacy_global_rng=True)) as (url, _):
        first = post_speech(url, bodies[0], expect=200)
        assert (first.headers[HEADER_SEED], first.headers[HEADER_SEED_SOURCE]) == ("42", "global")
        alone = [pcm_hash(post_speech(url, body, expect=200).content, "wav") for body in bodies]
        assert alone[0] == pcm_hash(first.content, "wav")  # an idle server starts the global stream afresh
        together = _together(url, bodies)
    shared = [i for i, r in enumerate(together) if int(r.headers[HEADER_MAX_IN_FLIGHT]) > 1]
    assert shared, "the requests never ran together"
    assert any(pcm_hash(together[i].content, "wav") != alone[i] for i in shared)  # batch-dependent


def test_the_fast_numerics_serve_too_and_a_request_alone_repeats_itself():
    body = {"input": TEXTS[1], "seed": 4, "max_new_tokens": 20}
    with running(SynthOptions(device="cpu", numerics=Numerics(batch_invariant=False))) as (url, _):
        first, again = post_speech(url, body, expect=200), post_speech(url, body, expect=200)
    assert int(first.headers[HEADER_FRAMES]) > 0
    assert pcm_hash(first.content, "wav") == pcm_hash(again.content, "wav")


@pytest.fixture(scope="module")
def plain():
    with running(SynthOptions(device="cpu")) as server:
        yield server


def test_an_engine_failure_fails_its_requests_with_a_500_and_the_server_goes_on(plain, monkeypatch):
    url, serving = plain
    generation = serving.synth.generation

    def failing(prepared):  # an injected fault while the engine admits this request
        if prepared.request.text == "explode":
            raise RuntimeError("injected fault")
        return generation(prepared)

    monkeypatch.setattr(serving.synth, "generation", failing)
    body = {"input": "Hello there.", "seed": 2, "max_new_tokens": 15}
    before = pcm_hash(post_speech(url, body, expect=200).content, "wav")
    response = post_speech(url, {"input": "explode", "max_new_tokens": 5})
    assert response.status_code == 500
    assert response.json()["error"]["type"] == "InternalServerError"
    assert serving.engine.failures == 1
    streamed = post_speech(url, {"input": "explode", "stream": True})
    assert streamed.status_code == 200  # the failure comes after the answer started: said in the stream
    [(name, event)] = sse_events(streamed.content)
    assert name == "speech.audio.error" and "injected fault" in event["error"]["message"]
    assert {k: v for k, v in event["error"].items() if k != "message"} == {
        "type": "server_error",
        "param": None,
        "code": 500,
    }  # nothing was sent, so nothing to discard
    assert serving.engine.failures == 2
    assert httpx.get(url + "/health", timeout=5).status_code == 200
    assert pcm_hash(post_speech(url, body, expect=200).content, "wav") == before


def test_an_unexpected_error_in_a_handler_is_a_500_in_the_openai_shape(plain, monkeypatch):
    url, serving = plain

    def broken(body):
        raise ValueError("a bug")

    monkeypatch.setattr(serving.intake, "prepare", broken)
    response = post_speech(url, {"input": "Hello."})
    assert response.status_code == 500
    error = response.json()["error"]
    assert error["message"] == "internal error: ValueError"
    assert (error["type"], error["code"]) == ("InternalServerError", 500)
    monkeypatch.undo()
    post_speech(url, {"input": "Hello.", "max_new_tokens": 5}, expect=200)
