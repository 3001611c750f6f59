"""`POST /v1/audio/speech/batch` on `moss serve`: each item runs in the continuous batch as a single
request does and gets bitwise the audio it gets alone, honours its own `seed`, fails on its own,
and the batch respects the server's key, queue bound, request timeout and client disconnects; the
bodies vllm-omni's batch route takes get the same class of answer. Real uvicorn, real tiny model."""

from __future__ import annotations

import base64
import re
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from serve_helpers import pcm_hash, running, running_long
from vllm_omni_server import FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni

from moss_cli.pipeline import SynthOptions
from moss_cli.serve.batch import BATCH_PATH
from moss_cli.speech_api import HEADER_CODES_SHA256, HEADER_FRAMES, HEADER_SEED, HEADER_SEED_SOURCE, SPEECH_PATH

KEY = "sk-batch-7Qm2"
AUTH = {"Authorization": f"Bearer {KEY}"}
TEXT = "Hello, and welcome to the reproducibility lab."
WAIT_S = 20.0


@pytest.fixture(scope="module")
def server():
    with running(SynthOptions(device="cpu", max_batch=4), api_key=KEY) as (url, serving):
        yield url


def _batch(url: str, body, **kwargs) -> httpx.Response:
    return httpx.post(url + BATCH_PATH, json=body, headers=AUTH, timeout=120, **kwargs)


def _alone(url: str, body: dict) -> httpx.Response:
    response = httpx.post(url + SPEECH_PATH, json=body, headers=AUTH, timeout=60)
    assert response.status_code == 200, response.text
    return response


def _results(response: httpx.Response) -> list[dict]:
    assert response.status_code == 200, response.text
    answer = response.json()
    assert re.fullmatch(r"speech-batch-[0-9a-f]{16}", answer["id"])
    results = answer["results"]
    assert [r["index"] for r in results] == list(range(len(results)))
    succeeded = sum(r["status"] == "success" for r in results)
    assert (answer["total"], answer["succeeded"], answer["failed"]) == (
        len(results),
        succeeded,
        len(results) - succeeded,
    )
    assert all(value is not None for r in results for value in r.values())  # null keys are left out
    return results


def _pcm_hash(result: dict) -> str:
    response_format = {"audio/wav": "wav", "audio/pcm": "pcm", "audio/flac": "flac"}[result["media_type"]]
    return pcm_hash(base64.b64decode(result["audio_data"]), response_format)


def _error(response: httpx.Response, status: int, param: str | None) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    expected = f"body.{param}" if error["type"] == "Bad Request" and param else param  # a schema error's
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == expected
    return error["message"]


def test_each_item_runs_in_the_batch_and_gets_bitwise_the_audio_it_gets_alone(server):
    shared = {"max_new_tokens": 30}
    items = [
        {"input": TEXT, "seed": 5},
        {"input": TEXT, "response_format": "pcm"},
        {"input": "Please speak slowly.", "instructions": "A calm voice.", "seed": 7, "response_format": "flac"},
        {"input": "Bonjour tout le monde.", "language": "fr", "seed": 3, "max_new_tokens": 12},
    ]
    results = _results(_batch(server, {**shared, "items": items}))
    assert all(r["status"] == "success" for r in results)
    for item, result in zip(items, results):
        alone = _alone(server, {**shared, **item})
        assert _pcm_hash(result) == pcm_hash(alone.content, item.get("response_format", "wav")), item
        assert result["moss_codes_sha256"] == alone.headers[HEADER_CODES_SHA256]
        assert result["moss_frames"] == int(alone.headers[HEADER_FRAMES])
        assert result["media_type"] == alone.headers["content-type"]
        assert result["usage"]["output_tokens"] == int(alone.headers["x-vllm-omni-output-tokens"])
        assert (result["moss_sample_rate"], result["moss_channels"]) == (48_000, 2)
    assert results[3]["moss_frames"] <= 12  # the item's own max_new_tokens beats the batch's
    assert max(r["moss_max_in_flight"] for r in results) > 1  # the items shared the engine's batch


def test_an_item_seed_is_honoured_and_an_unseeded_item_takes_the_deploy_seed(server):
    items = [{"input": TEXT, "seed": 5}, {"input": TEXT, "seed": 5}, {"input": TEXT, "seed": 6}, {"input": TEXT}]
    body = {"max_new_tokens": 30, "items": items}
    first, again = _results(_batch(server, body)), _results(_batch(server, body))
    codes = [r["moss_codes_sha256"] for r in first]
    assert codes == [r["moss_codes_sha256"] for r in again]  # reproducible, batch after batch
    assert codes[0] == codes[1] and codes[0] != codes[2]
    assert [(r["moss_seed"], r["moss_seed_source"]) for r in first] == [
        (5, "request"),
        (5, "request"),
        (6, "request"),
        (42, "deploy"),  # the tiny recipe's stage-0 seed, as for a single unseeded request
    ]
    unseeded = _alone(server, {"input": TEXT, "max_new_tokens": 30})
    assert (unseeded.headers[HEADER_SEED], unseeded.headers[HEADER_SEED_SOURCE]) == ("42", "deploy")
    assert codes[3] == unseeded.headers[HEADER_CODES_SHA256]
    assert codes[0] == _alone(server, {"input": TEXT, "max_new_tokens": 30, "seed": 5}).headers[HEADER_CODES_SHA256]


def test_a_bad_item_fails_alone_with_a_message_naming_its_field(server):
    good = {"input": "Yes.", "seed": 1}
    bad = {
        "input": {"input": ""},
        "max_new_tokens": {"input": "Yes.", "max_new_tokens": 0},
        "seed": {"input": "Yes.", "seed": "five"},
        "tempreature": {"input": "Yes.", "tempreature": 1.0},
        "response_format": {"input": "Yes.", "response_format": "mp3"},
        "stream": {"input": "Yes.", "stream": True},
    }
    results = _results(_batch(server, {"max_new_tokens": 6, "items": [good, *bad.values(), good]}))
    assert results[0]["status"] == results[-1]["status"] == "success"
    assert results[0]["moss_codes_sha256"] == results[-1]["moss_codes_sha256"]
    for field, result in zip(bad, results[1:-1]):
        assert set(result) == {"index", "status", "error"} and result["status"] == "error", result
        assert result["error"].startswith(f"{field}:"), (field, result["error"])


def test_problems_of_the_whole_batch_get_the_api_error_and_status(server):
    one = [{"input": "Yes.", "max_new_tokens": 1}]
    assert "32" in _error(_batch(server, {"items": one * 33}), 400, "items")
    assert _results(_batch(server, {"items": one * 32}))[31]["status"] == "success"  # 32 is the limit
    assert _error(_batch(server, {"items": []}), 400, "items")
    assert _error(_batch(server, {}), 400, "items")
    assert _error(_batch(server, [one]), 400, None)
    assert _error(_batch(server, {"items": ["Yes."]}), 400, "items")
    assert _error(_batch(server, {"model": "other", "items": one}), 404, "model")
    assert "each item its own 'seed'" in _error(_batch(server, {"seed": 1, "items": one}), 400, "seed")
    malformed = httpx.post(
        server + BATCH_PATH, content=b'{"items": [', headers={**AUTH, "content-type": "application/json"}, timeout=30
    )
    assert _error(malformed, 400, None)
    assert _error(httpx.post(server + BATCH_PATH, content=b"{}", headers=AUTH, timeout=30), 400, None)
    served = httpx.get(server + "/v1/models", headers=AUTH, timeout=30).json()["data"][0]["id"]
    assert _results(_batch(server, {"model": served, "items": one}))[0]["status"] == "success"


def test_the_batch_route_needs_the_key(server):
    body = {"items": [{"input": "Yes.", "max_new_tokens": 1}]}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        refused = httpx.post(server + BATCH_PATH, json=body, headers=headers, timeout=30)
        assert _error(refused, 401, None) and KEY not in refused.text
    assert _results(_batch(server, body))[0]["status"] == "success"


@pytest.fixture(scope="module")
def vllm_omni():
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        yield url


def test_the_bodies_vllm_omni_takes_get_the_same_class_of_answer(server, vllm_omni):
    voice = data_url(reference_wav())  # vllm-omni's MOSS-TTS-Local needs one; moss takes it too
    bodies = [
        {"ref_audio": voice, "max_new_tokens": 3, "items": [{"input": "First."}, {"input": "Two.", "seed": 4}]},
        {
            "ref_audio": voice,
            "items": [{"input": "Fine.", "max_new_tokens": 3, "response_format": "pcm"}, {"input": ""}],
        },
        {"items": []},
        {"items": [{"input": "x"}] * 33},
        {"model": "other", "items": [{"input": "x"}]},
        {"items": "x"},
        {"input": "x"},
    ]
    for body in bodies:
        ours = _batch(server, body)
        theirs = httpx.post(vllm_omni + BATCH_PATH, json=body, timeout=60)
        assert ours.status_code == theirs.status_code, (body, ours.text, theirs.text)
        if theirs.status_code != 200:
            assert set(ours.json()["error"]) == set(theirs.json()["error"])
            continue
        ours, theirs = ours.json(), theirs.json()
        assert set(ours) == set(theirs)
        for mine, its in zip(ours["results"], theirs["results"], strict=True):
            assert (mine["index"], mine["status"], mine.get("media_type")) == (
                its["index"],
                its["status"],
                its.get("media_type"),
            )
            assert set(its) <= set(mine)  # moss adds moss_* keys
            if "usage" in its:
                assert set(mine["usage"]) == set(its["usage"])


@pytest.fixture(scope="module")
def bounded(tmp_path_factory):
    """One place in the batch, two in the queue, requests cut after 2 s; each runs to its budget."""
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=1, max_queue=2, request_timeout_s=2) as served:
        yield served


def _until(condition) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, "the server did not get there in time"
        time.sleep(0.02)


def test_a_batch_joins_the_queue_all_together_or_not_at_all(bounded):
    url, serving = bounded
    engine = serving.engine
    long = {"input": "A long request.", "max_new_tokens": 3000}
    # 1 running + 2 waiting: a batch of 4 could never be held at once
    assert "--max-queue" in _error(_batch(url, {"items": [long] * 4}), 400, "items")
    before = engine.cancellations
    with ThreadPoolExecutor(2) as pool:
        singles = []
        for in_flight in (1, 2):
            singles.append(pool.submit(_alone_status, url, {**long, "seed": in_flight}))
            _until(lambda: engine.in_flight == in_flight)
        refused = _batch(url, {"items": [long, long]})  # the first item takes the last place, the second none
        assert refused.headers["retry-after"] == "1"
        assert "--max-queue" in _error(refused, 503, None)
        assert [s.result() for s in singles] == [504, 504]  # --request-timeout
    _until(lambda: engine.in_flight == 0)
    assert engine.cancellations == before + 3  # the two timed out, and the batch's first item withdrawn


def _alone_status(url: str, body: dict) -> int:
    return httpx.post(url + SPEECH_PATH, json=body, timeout=60).status_code


def test_an_item_past_the_request_timeout_is_cancelled_and_the_others_keep_their_audio(bounded):
    url, serving = bounded
    before = serving.engine.cancellations
    items = [{"input": "A short one.", "max_new_tokens": 3}, {"input": "A long one.", "max_new_tokens": 3000}]
    short, long = _results(_batch(url, {"items": items}))
    assert short["status"] == "success" and short["moss_frames"] == 3
    assert long["status"] == "error" and "--request-timeout" in long["error"] and long["moss_request_id"]
    _until(lambda: serving.engine.in_flight == 0)
    assert serving.engine.cancellations == before + 1


@pytest.fixture(scope="module")
def patient(tmp_path_factory):
    with running_long(tmp_path_factory.mktemp("deploy"), max_batch=2) as served:
        yield served


def test_a_client_that_goes_away_cancels_the_items_still_running(patient):
    url, serving = patient
    before = serving.engine.cancellations
    items = [{"input": "First.", "max_new_tokens": 3000}, {"input": "Second.", "max_new_tokens": 3000}]
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(url + BATCH_PATH, json={"items": items}, timeout=httpx.Timeout(10, read=0.5))
    _until(lambda: serving.engine.in_flight == 0)
    assert serving.engine.cancellations == before + 2
    after = _results(httpx.post(url + BATCH_PATH, json={"items": [{"input": "Yes.", "max_new_tokens": 3}]}, timeout=60))
    assert after[0]["moss_frames"] == 3
