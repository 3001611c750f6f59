"""`moss serve --max-queue N`: past N waiting requests the answer is 503 with Retry-After, never an
unbounded queue; the `--server` clients wait as long as Retry-After says and send again (each re-send
shown), up to --retries."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from cli_runs import moss, write_rows  # tests/ is on sys.path
from serve_helpers import post_speech, running_long, sse_events

from moss_cli.speech_api import SPEECH_PATH

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
FRAMES = 300  # long enough to hold the one place in the batch while the others arrive


@pytest.fixture(scope="module")
def queued(tmp_path_factory):
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=1, max_queue=1) as (url, _):
        yield url


def test_past_the_queue_the_answer_is_503_with_retry_after_and_the_queue_stays_bounded(queued):
    bodies = [
        {"input": f"Request {seed}.", "seed": seed, "max_new_tokens": FRAMES, "response_format": "pcm"}
        for seed in range(6)
    ]
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(lambda body: post_speech(queued, body, timeout=120), bodies))
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
    write_rows(requests, rows)
    args = ["synth", str(requests), "--server", queued, "-o", str(tmp_path / "out"), "--concurrency", "4"]
    result = moss(*args, "--retries", 20)
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
    answer = post_speech(url, long)
    assert answer.status_code == 504
    assert "--request-timeout" in answer.json()["error"]["message"]
    with httpx.stream("POST", url + SPEECH_PATH, json={**long, "stream_format": "audio"}, timeout=60) as streamed:
        assert streamed.status_code == 200
        with pytest.raises(httpx.HTTPError):  # a raw stream is cut, not finished
            for _ in streamed.iter_raw():
                pass
    events = sse_events(post_speech(url, {**long, "stream": True}).content)
    name, error = events[-1]  # an event stream says so in its last event
    assert name == "speech.audio.error" and "--request-timeout" in error["error"]["message"]
    assert error["error"]["code"] == 504
    deadline = time.monotonic() + 20
    while serving.engine.in_flight and time.monotonic() < deadline:
        time.sleep(0.05)
    assert serving.engine.in_flight == 0 and serving.engine.cancellations >= 2
    short = post_speech(url, {**long, "max_new_tokens": 3})
    assert short.status_code == 200
