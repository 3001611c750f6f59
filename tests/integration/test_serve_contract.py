"""`moss serve`'s `POST /v1/audio/speech` against vllm-omni 0.30.0's (the test double in
tests/vllm_omni_server.py, checked against the wheel by test_vllm_omni_fixture.py): the same
bodies, valid and invalid, to both servers. Each must get the same status; a valid one the same
content type and framing (SSE event names, order and JSON keys; the raw WAV header; the file's
rate and channels). Where moss deliberately answers otherwise, the body is in DIFFERENCES (moss
refuses what vllm-omni takes), MOSS_TAKES (moss answers what vllm-omni refuses) or OTHER_STATUS
(both refuse, with other statuses), each with its reason; batches likewise (BATCH_SAME,
BATCH_DIFFERENCES), and /health. Those lists are the record of where moss differs."""

from __future__ import annotations

import ast
import base64
import io
import re
import struct
from typing import Any

import httpx
import pytest
import soundfile as sf
from serve_helpers import post_speech, running, sse_events
from vllm_omni_server import DEFAULT_MODEL, FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni

from moss_cli.pipeline import SynthOptions
from moss_cli.serve.batch import BATCH_PATH
from moss_cli.serve.server import TINY_NAME
from moss_cli.speech_api import HEADER_SEED, HEALTH_PATH, SPEECH_PATH

REF = data_url(reference_wav())  # 2 s: a reference both take (vllm-omni's MOSS-TTS-Local needs one)
URL_REF = "http://127.0.0.1:9/voice.wav"  # the fake vllm-omni "fetches" it; moss never fetches
BASE = {"input": "Hello there.", "ref_audio": REF, "seed": 7, "max_new_tokens": 3}
SERVED = "<served model>"  # replaced by each server's model name
DROP = object()  # a BASE key the body leaves out


def body(**changes: Any) -> dict:
    merged = {**BASE, **changes}
    return {k: v for k, v in merged.items() if v is not DROP}


# Bodies both servers must answer alike (same status; for 200s, same framing).
SAME: dict[str, Any] = {
    "minimal": body(),
    "pcm": body(response_format="pcm"),
    "flac": body(response_format="flac"),
    "default format": body(response_format=DROP),
    "served model": body(model=SERVED),
    "empty model": body(model=""),
    "seed as a string": body(seed="5"),  # pydantic's lax types: seed 5 on both
    "seed 0": body(seed=0),
    "seed -1": body(seed=-1),  # a seed like any other on both (docs/serve.md, "Seeds")
    "seed -1 as a string": body(seed="-1"),
    "lowest int64 seed": body(seed=-(2**63)),
    "no seed": body(seed=DROP),
    "tts_local_seed": body(seed=DROP, extra_params={"tts_local_seed": 11}),
    "tts_local_seed as a string": body(seed=DROP, extra_params={"tts_local_seed": "7"}),  # vllm-omni: int("7")
    "tts_local_seed -1": body(seed=DROP, extra_params={"tts_local_seed": -1}),
    "tts_local_seed null": body(seed=DROP, extra_params={"tts_local_seed": None}),  # no seed on both
    "voice default": body(voice="default"),
    "speaker object default": body(speaker={"id": "default"}),
    "speed 1 and nulls": body(speed=1.0, sample_rate=None, task_type=None, stream_format=None, extra_params=None),
    "speed null": body(speed=None),
    "task Base": body(task_type="Base"),
    "false flags": body(x_vector_only_mode=False, word_timestamps=False, stream=False),
    "language": body(language="English"),
    "ref_text": body(ref_text="A reference transcript."),
    "references": body(ref_audio=DROP, references=[{"audio_path": REF, "text": "A reference transcript."}]),
    "instructions": body(instructions="A calm voice."),  # moss's prompt reads it; vllm-omni's Local ignores it
    "ambient_sound": body(ambient_sound="rain"),  # ditto
    "moss's sampler override": body(audio_temperature=1.2),  # vllm-omni drops it
    "moss's prompt fields": body(extra_params={"tokens": 40, "quality": "high"}),  # vllm-omni: stage-0 extra_args
    "sse": body(stream=True),
    "sse pcm": body(stream=True, response_format="pcm"),
    "sse by stream_format": body(stream_format="sse"),
    "raw": body(stream_format="audio"),
    "raw pcm": body(stream=True, stream_format="audio", response_format="pcm"),
    # invalid
    "no input": body(input=DROP),
    "blank input": body(input="   "),
    "empty input": body(input=""),
    "another model": body(model="tts-1"),
    "seed not a number": body(seed="x"),
    "fractional seed": body(seed=1.5),
    "seed past int64": body(seed=2**64),
    "max_new_tokens 0": body(max_new_tokens=0),
    "speed out of range": body(speed=5),
    "streamed speed": body(speed=2.0, stream=True),
    "aac": body(response_format="aac"),
    "null format": body(response_format=None),
    "flac stream": body(response_format="flac", stream=True),
    "mp3 raw stream": body(response_format="mp3", stream_format="audio"),
    "stream not a bool": body(stream="maybe"),
    "unknown stream_format": body(stream_format="chunks"),
    "sample_rate 0": body(sample_rate=0),
    "other sample_rate": body(sample_rate=24_000),
    "task unknown": body(task_type="Clone"),
    "voice object without id": body(voice={"name": "x"}),
    "ref_audio list": body(ref_audio=[REF]),
    "ref_audio number": body(ref_audio=5),
    "ref_audio bare path": body(ref_audio="voice.wav"),
    "ref_audio not audio": body(ref_audio="data:audio/wav;base64," + base64.b64encode(b"not audio" * 50).decode()),
    "two references": body(references=[{"audio_path": REF}, {"audio_path": REF}]),
    "references and another ref_audio": body(references=[{"audio_path": "data:audio/wav;base64,AA=="}]),
    "word_timestamps": body(word_timestamps=True),
    "speaker_embedding": body(speaker_embedding=[0.1, 0.2]),
    "extra_params not an object": body(extra_params=[1]),
    "body not an object": [body()],
}

# Bodies moss refuses (4xx naming the field) where vllm-omni answers 200, and why.
DIFFERENCES: dict[str, tuple[dict, str, str]] = {
    "unknown field": (body(colour="red"), "colour", "a typo must not pass silently; vllm-omni drops it"),
    "top-level temperature": (
        body(temperature=0.7),
        "temperature",
        "vllm-omni drops it and samples at fixed values; moss names audio_temperature",
    ),
    "speed": (body(speed=1.5), "speed", "moss does not time-stretch: its audio stays bitwise the model's"),
    "mp3": (body(response_format="mp3"), "response_format", "lossless formats only: the samples sent are the made"),
    "opus": (body(response_format="opus"), "response_format", "ditto"),
    "voice name": (body(voice="alloy"), "voice", "no named voices; vllm-omni ignores names it has not uploaded"),
    "speaker name": (body(speaker="alloy"), "speaker", "ditto, under its other name"),
    "CustomVoice": (body(task_type="CustomVoice"), "task_type", "MOSS-TTS-Local has no preset voices"),
    "stage-0 temperature": (
        body(extra_params={"temperature": 0.5}),
        "extra_params.temperature",
        "no audible effect in vllm-omni (one-hot stage-0 logits); moss names audio_temperature",
    ),
    "unknown extra_params": (body(extra_params={"colour": 1}), "extra_params.colour", "a typo must not pass silently"),
    "unknown language": (body(language="Klingon"), "language", "moss checks the names the model was trained on"),
    "ref_audio_2": (body(ref_audio_2=REF), "ref_audio_2", "MOSS-TTSD only; not read for MOSS-TTS-Local"),
    "duration_seconds": (body(duration_seconds=2.0), "duration_seconds", "MOSS-SoundEffect only; not read"),
    "initial_codec_chunk_frames": (
        body(initial_codec_chunk_frames=2),
        "initial_codec_chunk_frames",
        "not read for MOSS; streams follow the deploy's schedule",
    ),
    "non_streaming_mode": (body(non_streaming_mode=True), "non_streaming_mode", "a Qwen3-TTS prompt mode; not read"),
    "x_vector_only_mode": (body(x_vector_only_mode=True), "x_vector_only_mode", "Qwen3-TTS only; not read"),
    "URL reference": (body(ref_audio=URL_REF), "ref_audio", "moss never fetches URLs (its own network is no target)"),
    "fractional tts_local_seed": (
        body(seed=DROP, extra_params={"tts_local_seed": 7.5}),
        "extra_params.tts_local_seed",
        "vllm-omni's runner truncates it to 7 with int() (gpu_model_runner.py:1968-1974) where its `seed` refuses "
        "7.5 (audio.py:160-166): a fractional seed is a typo, read as `seed` is read",
    ),
    "frames past moss's bound": (
        body(max_new_tokens=2_000_000),
        "max_new_tokens",
        "past 1,000,000 frames (22 hours) a value is a typo",
    ),
}

# Bodies both refuse with another status, and why: (body, moss's status, vllm-omni's status, why).
OTHER_STATUS: dict[str, tuple[dict, int, int, str]] = {
    "file:// reference": (
        body(ref_audio="file:///srv/voices/a.wav"),
        400,
        500,
        "vllm-omni started without --allowed-local-media-path answers vLLM's RuntimeError as a 500 "
        "(serving_speech.py:2720-2733); moss serve without --allowed-media-dir refuses the request it cannot "
        "serve with a 400 naming ref_audio and the option",
    ),
}

# Bodies moss answers (200) where vllm-omni refuses (400), and why.
MOSS_TAKES: dict[str, tuple[dict, str]] = {
    "no reference": (body(ref_audio=DROP), "moss speaks without a reference (the prompt's generation mode)"),
    "the codec's rate": (body(sample_rate=48_000), "it is the rate the audio has; vllm-omni refuses any sample_rate"),
}


@pytest.fixture(scope="module")
def servers():
    """(moss serve's URL, vllm-omni's URL)."""
    engine = FakeMossLocalEngine(fixed=True)
    with running(SynthOptions(device="cpu", max_batch=4)) as (moss, _):
        with serving_vllm_omni(engine, ref_audio_urls={URL_REF: reference_wav()}) as vllm_omni:
            yield moss, vllm_omni


def _post(url: str, sent: Any, model: str) -> httpx.Response:
    if isinstance(sent, dict) and sent.get("model") == SERVED:
        sent = {**sent, "model": model}
    return post_speech(url, sent)


def _both(servers, sent: Any) -> tuple[httpx.Response, httpx.Response]:
    moss, vllm_omni = servers
    return _post(moss, sent, TINY_NAME), _post(vllm_omni, sent, DEFAULT_MODEL)


def _error(response: httpx.Response) -> dict:
    error = response.json()["error"]
    assert list(error) == ["message", "type", "param", "code"] and error["code"] == response.status_code
    return error


def _schema_message(error: dict) -> str:
    """pydantic's message for the first field of vLLM's schema error ("N validation error(s):", then
    each error's dict), which moss's message for that field must say too; "" where the message is a
    validator's own words (a `value_error`: each server words its own)."""
    lines = error["message"].splitlines()
    assert re.fullmatch(r"\d+ validation errors?:", lines[0]), error
    if "'type': 'value_error'" in lines[1]:
        return ""
    msg = re.search(r"'msg': ('(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")", lines[1])  # a str literal, as repr() writes it
    return str(ast.literal_eval(msg.group(1)))


def _framing(response: httpx.Response) -> Any:
    """What a client relies on in an answer with audio: for a file, its container, rate and
    channels; for an SSE stream, each event's name and JSON keys (and the header delta); for a
    raw stream, the WAV header."""
    kind = response.headers["content-type"]
    content = response.content
    if kind.startswith("text/event-stream"):
        events = sse_events(content)
        names = [name for i, (name, _) in enumerate(events) if i == 0 or events[i - 1][0] != name]
        deltas = [data for name, data in events if name == "speech.audio.delta"]
        done = events[-1][1]
        header = base64.b64decode(deltas[0]["audio"]) if deltas[0]["response_format"] == "wav" else None
        keys = {tuple(data) for data in deltas}, {data["response_format"] for data in deltas}
        return kind, names, keys, list(done), list(done["usage"]), list(done["usage"]["input_token_details"]), header
    if kind == "audio/pcm":
        assert len(content) % 4 == 0  # 16-bit stereo
        return kind
    usage = sorted(k for k in response.headers if k.startswith("x-vllm-omni-"))
    if content[4:8] == b"\xff\xff\xff\xff":  # a streamed WAV: the header as it is
        assert (len(content) - 44) % 4 == 0
        return kind, content[:44]
    info = sf.info(io.BytesIO(content))
    return kind, usage, info.format, info.subtype, info.samplerate, info.channels


@pytest.mark.parametrize("name", list(SAME))
def test_the_same_body_gets_the_same_answer_from_both(servers, name):
    moss, vllm_omni = _both(servers, SAME[name])
    assert moss.status_code == vllm_omni.status_code, (moss.text[:300], vllm_omni.text[:300])
    if moss.status_code == 200:
        assert _framing(moss) == _framing(vllm_omni)
    else:
        mine, theirs = _error(moss), _error(vllm_omni)
        if str(theirs["param"]).startswith("body."):  # a field's type or range: vLLM's "Bad Request", body.<field>
            assert (mine["type"], mine["param"]) == (theirs["type"], theirs["param"]), (mine, theirs)
            assert _schema_message(theirs) in mine["message"], (mine, theirs)  # pydantic's words for the field
        else:
            assert mine["type"] in ("BadRequestError", "Bad Request", "NotFoundError"), mine


@pytest.mark.parametrize("name", list(DIFFERENCES))
def test_moss_refuses_what_vllm_omni_takes_where_listed(servers, name):
    sent, param, _reason = DIFFERENCES[name]
    moss, vllm_omni = _both(servers, sent)
    assert vllm_omni.status_code == 200, vllm_omni.text[:300]
    assert moss.status_code == 400 and _error(moss)["param"] == param, moss.text


@pytest.mark.parametrize("name", list(OTHER_STATUS))
def test_both_refuse_with_the_status_listed(servers, name):
    sent, mine, theirs, _reason = OTHER_STATUS[name]
    moss, vllm_omni = _both(servers, sent)
    assert (moss.status_code, vllm_omni.status_code) == (mine, theirs), (moss.text[:300], vllm_omni.text[:300])
    assert _error(vllm_omni)["message"] == "Speech generation failed: Cannot load local files without " + (
        "`--allowed-local-media-path`."
    )
    assert _error(moss)["param"] == "ref_audio" and "--allowed-media-dir" in _error(moss)["message"]


@pytest.mark.parametrize("name", list(MOSS_TAKES))
def test_moss_answers_what_vllm_omni_refuses_where_listed(servers, name):
    moss, vllm_omni = _both(servers, MOSS_TAKES[name][0])
    assert vllm_omni.status_code == 400, vllm_omni.text[:300]
    assert moss.status_code == 200, moss.text


@pytest.mark.parametrize(
    "content, kind",
    [
        (b'{"input": "x",', "application/json"),
        (b'{"input": "x"}', "text/plain"),
        (b'{"input": "\xff"}', "application/json"),
    ],
)
def test_a_body_that_is_no_json_is_a_400_from_both(servers, content, kind):
    moss, vllm_omni = (
        httpx.post(url + SPEECH_PATH, content=content, headers={"content-type": kind}, timeout=30) for url in servers
    )
    assert moss.status_code == vllm_omni.status_code == 400
    assert _error(moss)["type"] == "BadRequestError"


def test_a_wav_stream_starts_with_the_same_header_alone(servers):
    """The first SSE delta of a wav stream is the 44-byte header with sizes 0xFFFFFFFF, as vllm-omni sends it."""
    moss, vllm_omni = _both(servers, SAME["sse"])
    headers = [base64.b64decode(sse_events(r.content)[0][1]["audio"]) for r in (moss, vllm_omni)]
    assert headers[0] == headers[1] and len(headers[0]) == 44
    assert struct.unpack("<4sI4s", headers[0][:12]) == (b"RIFF", 0xFFFFFFFF, b"WAVE")


def test_a_seed_given_as_a_string_or_negative_is_that_seed_on_both(servers):
    """vllm-omni reads `seed` in pydantic's lax mode within int64 (audio.py:160-166) and
    `extra_params.tts_local_seed` with int() (gpu_model_runner.py:1968-1974), and seeds a generator
    with it, a negative seed included: "7" is the seed 7 and -1 a seed of its own, on both servers."""
    for url, model in zip(servers, (TINY_NAME, DEFAULT_MODEL)):
        audio = {}
        for name, sent in {
            "7": body(seed=7),
            "'7'": body(seed="7"),
            "tts_local_seed '7'": body(seed=DROP, extra_params={"tts_local_seed": "7"}),
            "-1": body(seed=-1),
            "'-1'": body(seed="-1"),
            "tts_local_seed -1": body(seed=DROP, extra_params={"tts_local_seed": -1}),
            "1": body(seed=1),
        }.items():
            response = _post(url, sent, model)
            assert response.status_code == 200, (url, name, response.text[:300])
            audio[name] = response.content
            if url == servers[0]:
                assert response.headers[HEADER_SEED] == name.split()[-1].strip("'"), name
        assert audio["7"] == audio["'7'"] == audio["tts_local_seed '7'"]
        assert audio["-1"] == audio["'-1'"] == audio["tts_local_seed -1"]
        assert len({audio["7"], audio["-1"], audio["1"]}) == 3  # -1 is neither 1 nor 7


HEALTH_EXTENSIONS = {"model", "max_batch", "in_flight"}  # moss's: what its engine holds


def test_health_answers_vllm_omnis_body_plus_moss_extensions(servers):
    """vllm-omni replaces vLLM's empty 200 with its own /health (api_server.py:342, 1937-1960)."""
    moss, vllm_omni = (httpx.get(url + HEALTH_PATH, timeout=10, trust_env=False) for url in servers)
    assert moss.status_code == vllm_omni.status_code == 200
    assert vllm_omni.json() == {"status": "healthy"}
    mine = moss.json()
    assert mine["status"] == "healthy" and set(mine) - {"status"} == HEALTH_EXTENSIONS, mine


def test_health_once_the_engine_has_stopped_is_vllm_omnis_503_body():
    """vllm-omni's unhealthy answer is `{"status": "unhealthy"}` with 503 (api_server.py:1946-1960),
    not the error shape."""
    with running(SynthOptions(device="cpu", max_batch=2)) as (url, serving):
        assert serving.engine.close(60)
        response = httpx.get(url + HEALTH_PATH, timeout=10, trust_env=False)
    assert response.status_code == 503
    assert response.json() == {"status": "unhealthy", "reason": "the engine is not running"}


ITEM = {"input": "Hello there.", "ref_audio": REF, "max_new_tokens": 2}

# Batches both servers answer alike: the same status; for 200, the same result keys (moss adds its
# moss_* keys) and the same status for each item, in order.
BATCH_SAME: dict[str, Any] = {
    "two items": {"items": [ITEM, {**ITEM, "input": "Goodbye."}]},
    "shared fields": {"ref_audio": REF, "max_new_tokens": 2, "response_format": "pcm", "items": [{"input": "A."}]},
    "an item's seed": {"items": [{**ITEM, "seed": 3}]},  # moss honours it; vllm-omni's items have none (dropped)
    # an item's own problem: that item fails, the others are served (serving_speech.py:2790-2802)
    "a blank item": {"items": [ITEM, {**ITEM, "input": "   "}]},
    "an item with a file:// reference": {"items": [ITEM, {**ITEM, "ref_audio": "file:///srv/voices/a.wav"}]},
    # the batch's own problems: 400 for the whole batch, a schema error naming the batch field
    "no items": {"items": []},
    "items missing": {"ref_audio": REF},
    "items not a list": {"items": ITEM},
    "batch speed out of range": {"speed": 9, "items": [ITEM]},
    "too many items": {"items": [ITEM] * 33},
    "another model": {"model": "tts-1", "items": [ITEM]},
}

# Batches moss answers 200 with that item's error where vllm-omni refuses the whole batch (400), and why.
BATCH_DIFFERENCES: dict[str, tuple[dict, str]] = {
    "an item without input": (
        {"items": [ITEM, {"ref_audio": REF}]},
        "vllm-omni validates every item's types as it reads the body; moss checks each item on its own, so one "
        "item's mistake does not fail the others",
    ),
    "an item's speed out of range": ({"items": [ITEM, {**ITEM, "speed": 5}]}, "ditto"),
}


def _batch(servers, sent: dict) -> tuple[httpx.Response, httpx.Response]:
    return tuple(httpx.post(url + BATCH_PATH, json=sent, timeout=120, trust_env=False) for url in servers)


def _results(response: httpx.Response) -> tuple[list, list]:
    answer = response.json()
    assert set(answer) == {"id", "results", "total", "succeeded", "failed"}, answer
    results = answer["results"]
    assert answer["total"] == len(results) and answer["succeeded"] + answer["failed"] == len(results)
    assert answer["failed"] == sum(r["status"] == "error" for r in results)
    assert [r["index"] for r in results] == list(range(len(results)))
    for r in results:
        assert bool(r.get("error")) == (r["status"] == "error"), r  # an error says why
    keys = [sorted(k for k in r if not k.startswith("moss_")) for r in results]
    return [r["status"] for r in results], keys


@pytest.mark.parametrize("name", list(BATCH_SAME))
def test_the_same_batch_gets_the_same_answer_from_both(servers, name):
    moss, vllm_omni = _batch(servers, BATCH_SAME[name])
    assert moss.status_code == vllm_omni.status_code, (moss.text[:300], vllm_omni.text[:300])
    if moss.status_code == 200:
        assert _results(moss) == _results(vllm_omni)
        return
    mine, theirs = _error(moss), _error(vllm_omni)
    if str(theirs["param"]).startswith("body."):
        assert (mine["type"], mine["param"]) == (theirs["type"], theirs["param"]), (mine, theirs)
        assert _schema_message(theirs) in mine["message"], (mine, theirs)


def test_a_file_uri_item_fails_on_vllm_omni_with_its_media_loaders_words(servers):
    _, vllm_omni = _batch(servers, BATCH_SAME["an item with a file:// reference"])
    failed = vllm_omni.json()["results"][1]
    words = "Cannot load local files without `--allowed-local-media-path`."  # str() of vLLM's RuntimeError
    assert failed == {"index": 1, "status": "error", "error": words}


@pytest.mark.parametrize("name", list(BATCH_DIFFERENCES))
def test_moss_fails_only_the_item_where_vllm_omni_refuses_the_batch_where_listed(servers, name):
    moss, vllm_omni = _batch(servers, BATCH_DIFFERENCES[name][0])
    assert vllm_omni.status_code == 400 and _error(vllm_omni)["type"] == "Bad Request", vllm_omni.text[:300]
    assert moss.status_code == 200 and _results(moss)[0] == ["success", "error"], moss.text[:300]
