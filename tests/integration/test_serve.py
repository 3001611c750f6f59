"""`moss serve` answers the speech API with exactly the audio `moss synth` makes, whatever else
is in flight: real uvicorn on 127.0.0.1, real tiny model, real audio bodies."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from cli_runs import write_rows  # tests/ is on sys.path
from serve_helpers import local_synth, pcm_hash, post_speech, running, sse_audio

from moss_cli.config.requests import read_requests
from moss_cli.pipeline import SynthOptions
from moss_cli.serve.audio import wav_stream_header
from moss_cli.speech_api import (
    ENVIRONMENT_PATH,
    HEADER_CODES_SHA256,
    HEADER_FRAMES,
    HEADER_MAX_IN_FLIGHT,
    HEADER_SAMPLE_RATE,
    HEADER_SEED,
    HEADER_SEED_SOURCE,
    HEADER_STOP_REASON,
    MEDIA_TYPES,
    MODELS_PATH,
    SPEECH_PATH,
    body_from_request,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECORDS = [
    {"id": "unseeded", "text": "Hello, and welcome to the reproducibility lab.", "max_new_frames": 40},
    {"id": "seed-zero", "text": "Hello, and welcome to the reproducibility lab.", "seed": 0, "max_new_frames": 40},
    {"id": "long", "text": "Tomorrow will be cloudy with a chance of rain.", "seed": 5, "max_new_frames": 60},
    {"id": "short", "text": "Yes.", "seed": 11, "max_new_frames": 12},
    {"id": "calm", "text": "Please speak slowly.", "instruction": "A calm voice.", "seed": 7, "audio_temperature": 1.2},
    {"id": "french", "text": "Bonjour tout le monde.", "language": "fr", "seed": 3, "max_new_frames": 30},
]


@pytest.fixture(scope="module")
def server():
    with running(SynthOptions(device="cpu", max_batch=4)) as (url, serving):
        yield url


@pytest.fixture(scope="module")
def local(tmp_path_factory):
    return local_synth(RECORDS, tmp_path_factory.mktemp("local"))


@pytest.fixture(scope="module")
def speech_bodies(tmp_path_factory):
    """Each record as the JSON body a client sends (the speech API's own mapping)."""
    path = write_rows(tmp_path_factory.mktemp("bodies") / "requests.jsonl", RECORDS)
    return {r.id: body_from_request(r) for r in read_requests(path)}


def test_health_and_models_answer_in_the_openai_shapes(server):
    models = httpx.get(server + MODELS_PATH, timeout=5).json()
    assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["moss-tts-local-tiny"]
    assert models["data"][0]["object"] == "model"
    assert httpx.get(server + "/health", timeout=5).json()["status"] == "healthy"


def test_the_server_reports_the_environment_a_local_run_of_the_same_model_records(server, tmp_path):
    served = httpx.get(server + ENVIRONMENT_PATH, timeout=30).json()
    local_synth(RECORDS[:1], tmp_path)
    recorded = json.loads((tmp_path / "out" / ".moss" / "environment.json").read_text())
    assert served.keys() == recorded.keys()
    differ = {k for k in served if served[k] != recorded[k]}
    assert differ <= {"engine_steps"}, differ  # the server's max batch is 4, the local run's the deploy's


@pytest.mark.parametrize("response_format", ["wav", "pcm", "flac"])
def test_a_response_holds_exactly_the_audio_and_codes_of_moss_synth(server, local, speech_bodies, response_format):
    for rid in ("unseeded", "calm"):
        response = post_speech(server, {**speech_bodies[rid], "response_format": response_format})
        assert response.status_code == 200, response.text
        assert response.headers["content-type"] == MEDIA_TYPES[response_format]
        row = local[rid]
        assert pcm_hash(response.content, response_format) == row["pcm_sha256"], rid
        assert response.headers[HEADER_CODES_SHA256] == row["codes_sha256"]
        assert int(response.headers[HEADER_FRAMES]) == row["frames"]
        assert response.headers[HEADER_STOP_REASON] == row["stop_reason"]
        assert int(response.headers[HEADER_SAMPLE_RATE]) == row["sample_rate"]


STREAMS = {  # how vllm-omni reads stream and stream_format (protocol/audio.py:327-334)
    "sse": {"stream": True},
    "sse-by-format": {"stream_format": "sse"},
    "raw": {"stream": True, "stream_format": "audio"},
    "raw-without-stream": {"stream_format": "audio"},
}


@pytest.mark.parametrize("response_format", ["wav", "pcm"])
@pytest.mark.parametrize("stream", list(STREAMS))
def test_a_streamed_response_arrives_in_chunks_and_equals_moss_synth(
    server, local, speech_bodies, stream, response_format
):
    body = {**speech_bodies["long"], "response_format": response_format, **STREAMS[stream]}
    with httpx.stream("POST", server + SPEECH_PATH, json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers.get("transfer-encoding") == "chunked"
        assert response.headers[HEADER_SEED] == "5" and response.headers[HEADER_SEED_SOURCE] == "request"
        assert HEADER_FRAMES not in response.headers  # only known once it has finished
        parts = list(response.iter_raw())
        kind = response.headers["content-type"]
    if stream.startswith("raw"):
        assert kind == MEDIA_TYPES[response_format]
        assert len(parts) > 1  # the deploy's schedule: 1 frame first, then chunks of 15
        content = b"".join(parts)
    else:
        assert kind == "text/event-stream; charset=utf-8"
        pieces, done = sse_audio(b"".join(parts))
        header = wav_stream_header(48_000, 2)
        assert (pieces[0] == header) == (response_format == "wav")  # the header alone, first
        assert len(pieces) > 1 + (response_format == "wav")  # audio in chunks
        frames = local["long"]["frames"]
        assert done["usage"]["output_tokens"] == frames + (local["long"]["stop_reason"] == "stop")
        assert done["usage"]["input_token_details"] == {"text_tokens": done["usage"]["input_tokens"], "audio_tokens": 0}
        content = b"".join(pieces)
    assert pcm_hash(content, response_format, streamed=True) == local["long"]["pcm_sha256"]


def test_concurrent_requests_share_the_batch_and_each_gets_its_audio_alone(server, local, speech_bodies):
    alone = {}
    for rid, body in speech_bodies.items():  # one at a time: the reference
        response = post_speech(server, body)
        assert response.headers[HEADER_MAX_IN_FLIGHT] == "1"
        alone[rid] = pcm_hash(response.content, "wav")
        assert alone[rid] == local[rid]["pcm_sha256"], rid
    with ThreadPoolExecutor(len(speech_bodies)) as pool:  # 6 at once, max batch 4
        together = dict(zip(speech_bodies, pool.map(lambda b: post_speech(server, b), speech_bodies.values())))
    for rid, response in together.items():
        assert response.status_code == 200
        assert pcm_hash(response.content, "wav") == alone[rid], rid
        assert response.headers[HEADER_CODES_SHA256] == local[rid]["codes_sha256"]
    in_flight = [int(r.headers[HEADER_MAX_IN_FLIGHT]) for r in together.values()]
    assert max(in_flight) > 1 and max(in_flight) <= 4


def test_seed_headers_follow_the_precedence_of_moss_synth(server, speech_bodies):
    seeded = post_speech(server, speech_bodies["seed-zero"]).headers
    assert (seeded[HEADER_SEED], seeded[HEADER_SEED_SOURCE]) == ("0", "request")  # 0 is a seed
    unseeded = post_speech(server, speech_bodies["unseeded"]).headers
    assert (unseeded[HEADER_SEED], unseeded[HEADER_SEED_SOURCE]) == ("42", "deploy")  # the tiny recipe's seed
