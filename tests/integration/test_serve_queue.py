"""`moss serve --max-queue N`: past N waiting requests the answer is 503 with Retry-After, never an
unbounded queue; the `--server` clients wait as long as Retry-After says and send again (each re-send
shown), up to --retries."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from serve_helpers import running_long, sse_events
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.speech_api import SPEECH_PATH

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FRAMES = 300  # long enough to hold the one place in the batch while the others arrive


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=1, max_queue=1) as (url, _):
        yield url


def _post(url: str, seed: int) -> httpx.Response:
    body = {"input": f"Request {seed}.", "seed": seed, "max_new_tokens": FRAMES, "response_format": "pcm"}
    return httpx.post(url + SPEECH_PATH, json=body, timeout=120)


def test_past_the_queue_the_answer_is_503_with_retry_after_and_the_queue_stays_bounded(queued):
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda seed: _post(queued, seed), range(6)))
    statuses = sorted(a.status_code for a in answers)
    assert statuses.count(200) >= 2 and statuses.count(503) >= 1, statuses
    assert set(statuses) <= {200, 503}
    refused = next(a for a in answers if a.status_code == 503)
    assert refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert (error["type"], error["code"]) == ("Service Unavailable", 503)
    assert "--max-queue" in error["message"]


def test_the_client_waits_as_retry_after_says_and_sends_again(queued, tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [{"id": f"r{i}", "text": f"Request {i}.", "seed": i, "max_new_frames": FRAMES} for i in range(4)]
    requests.write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["synth", str(requests), "--server", queued, "-o", str(tmp_path / "out"), "--concurrency", "4"]
    result = CliRunner().invoke(app, [*args, "--retries", "20"])
    assert result.exit_code == 0, result.output
    assert "retry:" in result.output and "--max-queue" in result.output
    assert len(list((tmp_path / "out").glob("r*.wav"))) == 4


@pytest.fixture(scope="module")
def timed(tmp_path_factory):
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=2, request_timeout_s=0.5) as served:
        yield served


def test_a_request_past_its_time_is_cancelled_frees_its_place_and_gets_a_clear_error(timed):
    url, serving = timed
    long = {"input": "A long request.", "seed": 1, "max_new_tokens": 3000}
    answer = httpx.post(url + SPEECH_PATH, json=long, timeout=60)
    assert answer.status_code == 504
    assert "--request-timeout" in answer.json()["error"]["message"]
    with httpx.stream("POST", url + SPEECH_PATH, json={**long, "stream_format": "audio"}, timeout=60) as streamed:
        assert streamed.status_code == 200
        with pytest.raises(httpx.HTTPError):  # a raw stream is cut, not finished
            for _ in streamed.iter_raw():
                pass
    events = sse_events(httpx.post(url + SPEECH_PATH, json={**long, "stream": True}, timeout=60).content)
    name, error = events[-1]  # an event stream says so in its last event
    assert name == "speech.audio.error" and "--request-timeout" in error["error"]["message"]
    assert error["error"]["code"] == 504
    deadline = time.monotonic() + 20
    while serving.engine.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serving.engine.in_flight == 0 and serving.engine.cancellations >= 2
    short = httpx.post(url + SPEECH_PATH, json={**long, "max_new_tokens": 3}, timeout=60)
    assert short.status_code == 200
