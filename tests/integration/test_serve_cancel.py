"""A client that goes away frees its place in `moss serve`'s batch at once, streaming or not, and
the server goes on serving: real uvicorn on 127.0.0.1, real tiny model."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import running_long

from moss_cli.speech_api import HEALTH_PATH, SPEECH_PATH

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
# The tiny model's stop head ends most requests within a few frames; these must outlast the test.
LONG = {"input": "A request whose client will not wait for it.", "seed": 3, "max_new_tokens": 5000}
WAIT_S = 20.0


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=2) as (url, serving):
        yield url, serving.engine


def _until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the server did not drop the request"
        time.sleep(0.02)


def _in_flight(url: str) -> int:
    return httpx.get(url + HEALTH_PATH, timeout=5).json()["in_flight"]


def test_a_streaming_client_that_disconnects_frees_its_place_at_once(server):
    url, service = server
    before = service.cancellations
    with httpx.stream("POST", url + SPEECH_PATH, json={**LONG, "stream_format": "audio"}, timeout=60) as response:
        assert response.status_code == 200
        chunks = response.iter_raw()  # kept: a dropped iterator closes the connection
        next(chunks)  # the WAV header and the first audio: the request is in the engine
        assert _in_flight(url) == 1
    _until(lambda: _in_flight(url) == 0)
    assert service.cancellations == before + 1


def test_a_client_that_gives_up_waiting_frees_its_place_and_the_server_goes_on(server):
    url, service = server
    before = service.cancellations
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + SPEECH_PATH, json=LONG, timeout=httpx.Timeout(10, read=0.5))
    _until(lambda: _in_flight(url) == 0)
    assert service.cancellations == before + 1
    short = httpx.post(url + SPEECH_PATH, json={**LONG, "max_new_tokens": 3}, timeout=60)
    assert short.status_code == 200 and short.headers["x-moss-frames"] == "3"
