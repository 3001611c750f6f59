"""`moss serve`'s `POST /v1/audio/speech` against vllm-omni 0.30.0's (the test double in
tests/vllm_omni_server.py, checked against the wheel by test_vllm_omni_fixture.py): the same
bodies, valid and invalid, to both servers. Each must get the same status; a valid one the same
content type and framing (SSE event names, order and JSON keys; the raw WAV header; the file's
rate and channels). Where moss deliberately answers otherwise, the body is in DIFFERENCES (moss
refuses what vllm-omni takes) or MOSS_TAKES (moss answers what vllm-omni refuses), each with its
reason: those lists are the record of where moss differs."""

from __future__ import annotations

import base64
import io
import struct
from typing import Any

import httpx
import pytest
import soundfile as sf
from serve_helpers import running, sse_events
from vllm_omni_server import DEFAULT_MODEL, FakeMossLocalEngine, data_url, reference_wav, serving_vllm_omni

from moss_cli.pipeline import SynthOptions
from moss_cli.serve.server import TINY_NAME
from moss_cli.speech_api import SPEECH_PATH

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
    "lowest int64 seed": body(seed=-(2**63)),
    "no seed": body(seed=DROP),
    "tts_local_seed": body(seed=DROP, extra_params={"tts_local_seed": 11}),
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
    "frames past moss's bound": (
        body(max_new_tokens=2_000_000),
        "max_new_tokens",
        "past 1,000,000 frames (22 hours) a value is a typo",
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
    return httpx.post(url + SPEECH_PATH, json=sent, timeout=60, trust_env=False)


def _both(servers, sent: Any) -> tuple[httpx.Response, httpx.Response]:
    moss, vllm_omni = servers
    return _post(moss, sent, TINY_NAME), _post(vllm_omni, sent, DEFAULT_MODEL)


def _error(response: httpx.Response) -> dict:
    error = response.json()["error"]
    assert list(error) == ["message", "type", "param", "code"] and error["code"] == response.status_code
    return error


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
        else:
            assert mine["type"] in ("BadRequestError", "Bad Request", "NotFoundError"), mine


@pytest.mark.parametrize("name", list(DIFFERENCES))
def test_moss_refuses_what_vllm_omni_takes_where_listed(servers, name):
    sent, param, _reason = DIFFERENCES[name]
    moss, vllm_omni = _both(servers, sent)
    assert vllm_omni.status_code == 200, vllm_omni.text[:300]
    assert moss.status_code == 400 and _error(moss)["param"] == param, moss.text


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
