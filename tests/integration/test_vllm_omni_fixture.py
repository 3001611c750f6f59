"""The fake vllm-omni 0.30.0 speech server (tests/vllm_omni_server.py) itself: its validation and
errors, its audio formats and streams, its batch route, where its random numbers come from, and
its request models against the real wheel's source (read from .cache/, never imported)."""

from __future__ import annotations

import ast
import asyncio
import base64
import io
import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import annotated_types
import httpx
import numpy as np
import pytest
import soundfile as sf
from vllm_omni_server import (  # tests/ is on sys.path
    DEFAULT_MODEL,
    FRAME_SAMPLES,
    BatchSpeechRequest,
    FakeMossLocalEngine,
    OpenAICreateSpeechRequest,
    SpeechBatchItem,
    StreamingSpeechSessionConfig,
    data_url,
    reference_wav,
    serving_vllm_omni,
)

WHEEL = Path(__file__).resolve().parents[2] / ".cache" / "vllm-omni" / "vllm_omni-0.30.0-py3-none-any.whl"
FIXTURE_SOURCE = Path(__file__).resolve().parents[1] / "vllm_omni_server.py"
REF = data_url(reference_wav())
TEXT = "Hello there, this is a test."
MISSING_REF = "MOSS-TTS-Local-Transformer requires 'ref_audio' (reference audio for voice cloning)."


def client(url: str) -> httpx.Client:
    return httpx.Client(base_url=url, timeout=30, trust_env=False)


@pytest.fixture(scope="module")
def before():
    """vllm-omni 0.30.0: unseeded requests share one generator."""
    engine = FakeMossLocalEngine(fixed=False)
    with serving_vllm_omni(engine) as url:
        yield engine, url


@pytest.fixture(scope="module")
def after():
    """After the fix: unseeded requests get their own generator seeded with the deploy seed."""
    engine = FakeMossLocalEngine(fixed=True)
    with serving_vllm_omni(engine) as url:
        yield engine, url


def speak(url: str, **body: Any) -> httpx.Response:
    body.setdefault("ref_audio", REF)
    with client(url) as c:
        return c.post("/v1/audio/speech", json={"input": TEXT, **body})


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert list(body) == ["error"]
    assert list(body["error"]) == ["message", "type", "param", "code"]
    assert body["error"]["code"] == response.status_code
    return body["error"]


def pcm_of_wav(data: bytes) -> np.ndarray:
    samples, rate = sf.read(io.BytesIO(data), dtype="int16", always_2d=True)
    assert rate == 48_000
    return samples


def sse_events(text: str) -> list[tuple[str, dict]]:
    """Split an SSE body into (event, data) pairs, checking the framing is exactly vllm-omni's."""
    assert text.endswith("\n\n")
    events = []
    for block in text[:-2].split("\n\n"):
        match = re.fullmatch(r"event: (speech\.audio\.\w+)\ndata: (\{.*\})", block)
        assert match, block[:200]
        data = json.loads(match.group(2))
        assert match.group(2) == json.dumps(data, separators=(",", ":"))  # compact, key order kept
        assert data["type"] == match.group(1)
        events.append((match.group(1), data))
    return events


async def speak_concurrently(url: str, bodies: list[dict]) -> list[httpx.Response]:
    async with httpx.AsyncClient(base_url=url, timeout=30, trust_env=False) as c:
        return list(await asyncio.gather(*(c.post("/v1/audio/speech", json=b) for b in bodies)))


# --- routes, validation, errors ---------------------------------------------------------------


def test_health_and_models(before):
    _, url = before
    with client(url) as c:
        assert c.get("/health").json() == {"status": "healthy"}
        models = c.get("/v1/models").json()
    assert models["object"] == "list"
    [card] = models["data"]
    assert card["id"] == DEFAULT_MODEL and card["owned_by"] == "vllm" and card["object"] == "model"
    assert card["permission"][0]["object"] == "model_permission"


def test_schema_errors_are_400_bad_request_with_the_field_as_param(before):
    _, url = before
    error = error_of(response := speak(url, speed=5))
    assert response.status_code == 400
    assert error["type"] == "Bad Request" and error["param"] == "body.speed"
    assert error["message"].startswith("1 validation error:\n  {'type': 'less_than_equal', 'loc': 'body.speed'")
    error = error_of(speak(url, response_format="aac"))
    assert error["param"] == "body.response_format" and "literal_error" in error["message"]
    error = error_of(speak(url, stream=True, response_format="flac"))
    assert error["param"] == "body"
    assert "requires response_format='pcm' or 'wav'. Got response_format='flac'." in error["message"]
    with client(url) as c:
        error = error_of(c.post("/v1/audio/speech", content=b"{}", headers={"content-type": "text/plain"}))
    assert error["message"] == "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed"
    assert error["param"] is None


def test_checks_run_in_vllm_omnis_order(before):
    _, url = before
    everything_wrong = {"input": "   ", "sample_rate": 48000, "model": "other", "ref_audio": None}
    assert error_of(speak(url, **everything_wrong, speed=9))["type"] == "Bad Request"  # schema first
    error = error_of(speak(url, **everything_wrong))
    assert error == {
        "message": "sample_rate is not supported by the current TTS model",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    del everything_wrong["sample_rate"]
    error = error_of(response := speak(url, **everything_wrong))
    assert response.status_code == 404
    assert error == {
        "message": "The model `other` does not exist.",
        "type": "NotFoundError",
        "param": "model",
        "code": 404,
    }
    del everything_wrong["model"]
    assert error_of(speak(url, **everything_wrong, stream=True, speed=2))["message"].startswith("SSE streaming is not")
    assert error_of(speak(url, **everything_wrong))["message"] == "Input text cannot be empty"
    everything_wrong["input"] = "hi"
    assert error_of(speak(url, **everything_wrong)) == {
        "message": MISSING_REF,
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    scheme = "ref_audio must be a URL (http/https), base64 data URL (data:...), or file URI (file://...)"
    assert error_of(speak(url, ref_audio="/tmp/ref.wav"))["message"] == scheme
    assert error_of(speak(url, ref_audio=[REF]))["message"] == scheme
    # A TypeError in a validator is no schema error: vLLM's TypeError handler makes it a BadRequestError.
    assert error_of(speak(url, ref_audio=5)) == {
        "message": "'ref_audio' must be a string or list of strings",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    references = speak(url, ref_audio=None, references=[{"audio_path": REF, "text": "A reference."}], max_new_tokens=1)
    assert references.status_code == 200


def test_served_model_name_and_voice_are_accepted(before):
    _, url = before
    assert speak(url, model=DEFAULT_MODEL, voice="anyone", seed=1, max_new_tokens=2).status_code == 200
    assert speak(url, model="", speaker="default", seed=1, max_new_tokens=2).status_code == 200


def test_streaming_with_speed_is_refused(before):
    _, url = before
    tail = " is not supported with speed adjustment. Use a non-streaming request or remove the speed parameter."
    assert error_of(speak(url, stream=True, speed=1.5))["message"] == "SSE streaming" + tail
    assert error_of(speak(url, stream_format="sse", speed=0.5))["message"] == "SSE streaming" + tail
    assert error_of(speak(url, stream_format="audio", stream=True, speed=2))["message"] == "Streaming" + tail


def test_reference_audio_is_fetched_decoded_and_checked(before):
    _, url = before
    short = error_of(speak(url, ref_audio=data_url(reference_wav(0.5))))
    assert short["message"] == "Reference audio too short (0.5s). At least 1s of clear speech is required."
    long = error_of(speak(url, ref_audio=data_url(reference_wav(30.5, rate=8000))))
    assert long["message"] == "Reference audio too long (30.5s). Maximum 30s supported \u2014 use a shorter clip."
    for seconds in (1.0, 30.0):
        assert speak(url, ref_audio=data_url(reference_wav(seconds, rate=8000)), max_new_tokens=1).status_code == 200
    stereo = data_url(reference_wav(2.0, channels=2))
    assert speak(url, ref_audio=stereo, max_new_tokens=1).status_code == 200
    failed = {
        "data:audio/wav,UklGRg==": "Only base64 data URLs are supported for now.",
        "file:///tmp/ref.wav": "Cannot load local files without `--allowed-local-media-path`.",
        "https://example.com/ref.wav": "Failed to fetch media from URL: HTTP 404 error",
    }
    for ref, cause in failed.items():
        response = speak(url, ref_audio=ref)
        assert response.status_code == 500
        message = f"Speech generation failed: {cause}"
        assert error_of(response) == {"message": message, "type": "InternalServerError", "param": None, "code": 500}
    assert error_of(speak(url, ref_audio=data_url(b"not audio")))["message"] == "Invalid or unsupported audio file."


def test_unknown_fields_are_dropped_silently(before):
    engine, url = before
    plain = speak(url, seed=11, max_new_tokens=4)
    tuned = speak(url, seed=11, max_new_tokens=4, temperature=0, audio_temperature=0.1, top_k=1, instructions="calm")
    assert plain.status_code == tuned.status_code == 200
    assert plain.content == tuned.content
    assert engine.received[-1]["temperature"] == 0 and engine.received[-1]["audio_temperature"] == 0.1
    speak(url, temperature=0, speed=99)  # refused by the schema, recorded all the same
    assert engine.received[-1]["speed"] == 99 and engine.requests[-1].speed == 1.0
    assert "temperature" not in engine.requests[-1].model_dump()
    assert not any(name.lower().startswith("x-moss") for name in tuned.headers)


def test_extra_params_tts_local_seed_seeds_the_request_and_seed_wins(before):
    _, url = before
    seven = speak(url, seed=7, max_new_tokens=3).content
    assert speak(url, extra_params={"tts_local_seed": 7, "temperature": 0.0}, max_new_tokens=3).content == seven
    assert speak(url, extra_params={"tts_local_seed": 8}, seed=7, max_new_tokens=3).content == seven


# --- audio ------------------------------------------------------------------------------------


def test_wav_is_48k_stereo_pcm16_and_pcm_is_its_samples(before):
    _, url = before
    wav = speak(url, seed=5, max_new_tokens=6)
    assert wav.headers["content-type"] == "audio/wav"
    info = sf.info(io.BytesIO(wav.content))
    assert (info.samplerate, info.channels, info.subtype, info.format) == (48_000, 2, "PCM_16", "WAV")
    assert info.frames == 6 * FRAME_SAMPLES
    assert struct.unpack("<I", wav.content[4:8])[0] == len(wav.content) - 8  # real sizes
    for header in ("INPUT", "OUTPUT", "TOTAL", "INPUT-TEXT", "INPUT-AUDIO"):
        assert int(wav.headers[f"X-VLLM-OMNI-{header}-TOKENS"]) >= 0
    pcm = speak(url, seed=5, max_new_tokens=6, response_format="pcm")
    assert pcm.headers["content-type"] == "audio/pcm"
    assert pcm.content == pcm_of_wav(wav.content).astype("<i2").tobytes()
    flac = speak(url, seed=5, max_new_tokens=6, response_format="flac")
    assert flac.headers["content-type"] == "audio/flac"
    assert np.array_equal(sf.read(io.BytesIO(flac.content), dtype="int16")[0], pcm_of_wav(wav.content))
    for fmt, media_type in (("mp3", "audio/mpeg"), ("opus", "audio/ogg")):
        response = speak(url, seed=5, max_new_tokens=2, response_format=fmt)
        assert response.status_code == 200 and response.headers["content-type"] == media_type


def test_speed_stretches_non_streaming_audio(before):
    _, url = before
    normal = pcm_of_wav(speak(url, seed=5, max_new_tokens=5).content)
    fast = pcm_of_wav(speak(url, seed=5, max_new_tokens=5, speed=2.0).content)
    slow = pcm_of_wav(speak(url, seed=5, max_new_tokens=5, speed=0.8).content)
    assert len(fast) == int(len(normal) / 2.0) and len(slow) == int(len(normal) / 0.8)


def test_the_gate_ends_a_request_and_max_new_tokens_caps_it(before):
    engine, url = before
    assert len(pcm_of_wav(speak(url, seed=9, max_new_tokens=3).content)) == 3 * FRAME_SAMPLES
    assert engine.jobs[-1].finish_reason == "length"
    free = pcm_of_wav(speak(url, seed=9).content)
    assert engine.jobs[-1].finish_reason == "stop"
    assert 0 < len(free) < 200 * FRAME_SAMPLES and len(free) % FRAME_SAMPLES == 0


def test_sse_stream_framing_and_audio(before):
    _, url = before
    whole = speak(url, seed=21, max_new_tokens=20, response_format="pcm").content
    response = speak(url, seed=21, max_new_tokens=20, stream=True)
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
    events = sse_events(response.text)
    kinds = [kind for kind, _ in events]
    assert kinds == ["speech.audio.delta"] * (len(events) - 1) + ["speech.audio.done"]
    deltas = [base64.b64decode(data["audio"]) for _, data in events[:-1]]
    assert all(
        data["response_format"] == "wav" and list(data) == ["type", "audio", "response_format"]
        for _, data in events[:-1]
    )
    header = deltas[0]
    assert len(header) == 44 and header[:4] == b"RIFF" and header[36:40] == b"data"
    assert struct.unpack("<I", header[4:8])[0] == struct.unpack("<I", header[40:44])[0] == 0xFFFFFFFF
    channels, rate, byte_rate, block_align, bits = struct.unpack("<HIIHH", header[22:36])
    assert (channels, rate, byte_rate, block_align, bits) == (2, 48_000, 192_000, 4, 16)
    assert [len(d) // 4 // FRAME_SAMPLES for d in deltas[1:]] == [1, 15, 4]  # the deploy's chunking
    assert b"".join(deltas[1:]) == whole
    usage = events[-1][1]["usage"]
    assert list(usage) == ["input_tokens", "output_tokens", "total_tokens", "input_token_details"]
    assert usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    assert usage["input_token_details"]["audio_tokens"] == 0

    pcm_events = sse_events(speak(url, seed=21, max_new_tokens=20, stream_format="sse", response_format="pcm").text)
    assert b"".join(base64.b64decode(d["audio"]) for k, d in pcm_events if k == "speech.audio.delta") == whole


def test_raw_audio_stream(before):
    _, url = before
    whole = speak(url, seed=22, max_new_tokens=17, response_format="pcm").content
    with client(url) as c:
        body = {"input": TEXT, "ref_audio": REF, "seed": 22, "max_new_tokens": 17, "stream_format": "audio"}
        with c.stream("POST", "/v1/audio/speech", json=body) as response:
            assert response.headers["content-type"] == "audio/wav"
            data = b"".join(response.iter_bytes())
        assert data[:4] == b"RIFF" and data[4:8] == b"\xff\xff\xff\xff" and data[40:44] == b"\xff\xff\xff\xff"
        assert data[44:] == whole
        raw_pcm = c.post("/v1/audio/speech", json={**body, "response_format": "pcm", "stream": False})
        assert raw_pcm.headers["content-type"] == "audio/pcm" and raw_pcm.content == whole


def test_an_engine_failure_mid_stream_is_an_sse_error_event():
    engine = FakeMossLocalEngine(fixed=False, fail_at_frame=3)
    with serving_vllm_omni(engine) as url:
        events = sse_events(speak(url, seed=1, max_new_tokens=10, stream=True).text)
        failed = speak(url, seed=1, max_new_tokens=10)
    kind, data = events[-1]
    assert kind == "speech.audio.error" and [k for k, _ in events[:-1]] == ["speech.audio.delta"] * 3
    assert data["error"] == {
        "message": "the fake engine failed at frame 3",
        "type": "server_error",
        "param": None,
        "code": 500,
        "partial_audio": True,
        "action": "discard",
    }
    assert error_of(failed)["message"] == "Speech generation failed: the fake engine failed at frame 3"


# --- batch route ------------------------------------------------------------------------------


def test_batch_route(after):
    engine, url = after
    body = {
        "ref_audio": REF,
        "max_new_tokens": 3,
        "seed": 1,  # not a batch field: ignored, items run unseeded
        "items": [
            {"input": "First item."},
            {"input": "Second item.", "response_format": "pcm", "max_new_tokens": 2},
            {"input": "  "},
            {"input": "Fourth.", "sample_rate": 24000},
        ],
    }
    with client(url) as c:
        result = c.post("/v1/audio/speech/batch", json=body).json()
        too_many = c.post("/v1/audio/speech/batch", json={"items": [{"input": "x"}] * 33})
        unknown = c.post("/v1/audio/speech/batch", json={"model": "other", "items": [{"input": "x"}]})
        empty = c.post("/v1/audio/speech/batch", json={"items": []})
    assert engine.received_batches[0]["seed"] == 1
    assert re.fullmatch(r"speech-batch-[0-9a-f]{16}", result["id"])
    assert (result["total"], result["succeeded"], result["failed"]) == (4, 2, 2)
    first, second, third, fourth = result["results"]
    assert first["status"] == "success" and first["media_type"] == "audio/wav" and "error" not in first
    assert len(pcm_of_wav(base64.b64decode(first["audio_data"]))) == 3 * FRAME_SAMPLES
    assert second["media_type"] == "audio/pcm" and len(base64.b64decode(second["audio_data"])) == 2 * FRAME_SAMPLES * 4
    assert third == {"index": 2, "status": "error", "error": "Input text cannot be empty"}
    assert fourth == {"index": 3, "status": "error", "error": "sample_rate is not supported by the current TTS model"}
    assert first["audio_data"] == base64.b64encode(speak(url, input="First item.", max_new_tokens=3).content).decode()
    assert error_of(too_many) == {
        "message": "Batch contains 33 items, exceeding the maximum of 32.",
        "type": "Bad Request",
        "param": None,
        "code": 400,
    }
    assert error_of(unknown)["type"] == "NotFoundError"
    assert error_of(empty)["param"] == "body.items"


# --- where the random numbers come from -------------------------------------------------------


def test_seeded_requests_are_reproducible_alone_and_in_batches(before):
    engine, url = before
    alone = [speak(url, seed=123, max_new_tokens=8).content for _ in range(2)]
    assert alone[0] == alone[1]
    others = [{"input": f"Other request number {i}.", "ref_audio": REF, "max_new_tokens": 12} for i in range(5)]
    others += [{"input": "Seeded neighbour.", "ref_audio": REF, "seed": 5, "max_new_tokens": 12}]
    mine = {"input": TEXT, "ref_audio": REF, "seed": 123, "max_new_tokens": 8}
    responses = asyncio.run(speak_concurrently(url, [mine, *others, mine]))
    assert responses[0].content == responses[-1].content == alone[0]
    assert max(job.max_batch for job in engine.jobs[-8:]) > 1  # they did share steps


def test_unseeded_requests_are_not_reproducible_before_the_fix(before):
    engine, url = before
    first, second = (speak(url, max_new_tokens=8).content for _ in range(2))
    assert first != second
    assert engine.jobs[-1].rng_source == "shared"
    assert first != speak(url, seed=42, max_new_tokens=8).content


def test_unseeded_requests_use_the_deploy_seed_after_the_fix(after):
    engine, url = after
    first, second = (speak(url, max_new_tokens=8).content for _ in range(2))
    assert first == second == speak(url, seed=42, max_new_tokens=8).content
    assert engine.jobs[-2].rng_source == "deploy" and engine.jobs[-1].rng_source == "request"
    noise = [{"input": f"Noise {i}.", "ref_audio": REF, "max_new_tokens": 10} for i in range(4)]
    mine = {"input": TEXT, "ref_audio": REF, "max_new_tokens": 8}
    responses = asyncio.run(speak_concurrently(url, [*noise, mine]))
    assert responses[-1].content == first


def test_no_deploy_seed_behaves_as_before_the_fix():
    engine = FakeMossLocalEngine(fixed=True, deploy_seed=None)
    with serving_vllm_omni(engine) as url:
        first, second = (speak(url, max_new_tokens=6).content for _ in range(2))
    assert first != second and engine.jobs[-1].rng_source == "shared"


# --- the request models against the real wheel ------------------------------------------------


def _constant(node: ast.AST, names: dict[str, Any]) -> Any:
    """Evaluate the wheel's constant expressions (2**63 - 1, -(2**63), names of constants)."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        return names[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_constant(node.operand, names)
    if isinstance(node, ast.BinOp):
        left, right = _constant(node.left, names), _constant(node.right, names)
        ops = {ast.Pow: lambda a, b: a**b, ast.Sub: lambda a, b: a - b, ast.Add: lambda a, b: a + b}
        return ops[type(node.op)](left, right)
    raise ValueError(ast.dump(node))


def _declared_fields(tree: ast.Module, class_name: str) -> dict[str, dict[str, Any]]:
    """name -> {annotation (source text), default, ge/le/gt/max_length/min_length, alias}."""
    names: dict[str, Any] = {}
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        if isinstance(target, ast.Name):
            try:
                names[target.id] = _constant(node.value, names)  # type: ignore[union-attr]
            except (ValueError, KeyError):
                pass
    [cls] = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    fields = {}
    for node in cls.body:
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        spec: dict[str, Any] = {"annotation": ast.unparse(node.annotation)}
        value = node.value
        if isinstance(value, ast.Call) and ast.unparse(value.func) == "Field":
            spec["default"] = _constant(value.args[0], names) if value.args else None
            for keyword in value.keywords:
                if keyword.arg == "default":
                    spec["default"] = _constant(keyword.value, names)
                elif keyword.arg in ("ge", "le", "gt", "max_length", "min_length"):
                    spec[keyword.arg] = _constant(keyword.value, names)
                elif keyword.arg == "validation_alias":
                    assert isinstance(keyword.value, ast.Call)
                    spec["alias"] = [_constant(arg, names) for arg in keyword.value.args]
        elif value is None:
            spec["default"] = ...
        else:
            spec["default"] = _constant(value, names)
        fields[node.target.id] = spec
    return fields


def _module_alias(tree: ast.Module, name: str) -> str:
    [node] = [n for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == name]
    return ast.unparse(node.value)


def _runtime_spec(model: type, name: str) -> dict[str, Any]:
    info = model.model_fields[name]
    spec: dict[str, Any] = {"default": ... if info.is_required() else info.default}
    kinds = {
        annotated_types.Ge: ("ge", "ge"),
        annotated_types.Le: ("le", "le"),
        annotated_types.Gt: ("gt", "gt"),
        annotated_types.MaxLen: ("max_length", "max_length"),
        annotated_types.MinLen: ("min_length", "min_length"),
    }
    for item in info.metadata:
        if type(item) in kinds:
            key, attribute = kinds[type(item)]
            spec[key] = getattr(item, attribute)
    if info.validation_alias is not None:
        spec["alias"] = list(info.validation_alias.choices)
    return spec


@pytest.mark.skipif(not WHEEL.exists(), reason=f"{WHEEL} is absent: scripts/setup.sh downloads it")
@pytest.mark.parametrize(
    "model",
    [OpenAICreateSpeechRequest, SpeechBatchItem, BatchSpeechRequest, StreamingSpeechSessionConfig],
    ids=lambda m: m.__name__,
)
def test_request_models_match_the_vllm_omni_wheel(model):
    with zipfile.ZipFile(WHEEL) as wheel:
        source = wheel.read("vllm_omni/entrypoints/openai/protocol/audio.py").decode()
    theirs_tree = ast.parse(source)
    ours_tree = ast.parse(FIXTURE_SOURCE.read_text())
    theirs = _declared_fields(theirs_tree, model.__name__)
    ours = _declared_fields(ours_tree, model.__name__)
    assert list(theirs) == list(ours) == list(model.model_fields)
    assert {n: s["annotation"] for n, s in theirs.items()} == {n: s["annotation"] for n, s in ours.items()}
    for name, spec in theirs.items():
        expected = {k: v for k, v in spec.items() if k != "annotation"}
        assert _runtime_spec(model, name) == expected, name
    assert _module_alias(theirs_tree, "SpeechSampleRate") == _module_alias(ours_tree, "SpeechSampleRate")


def test_the_doubles_unseeded_requests_never_answer_empty_so_never_hold_by_chance():
    """The released double draws unseeded requests from one shared stream: two answers of one must differ.
    An answer of no frames would not (empty is empty, whatever the stream): the gate never stops at the
    first frame, for the built-in set's shortest text too (`Yes.` stopped there 3% of the time)."""
    from vllm_omni_server import Conditioning, GenerationJob

    from moss_cli.config.builtin import builtin_requests

    for request in builtin_requests():
        job = GenerationJob(Conditioning(request.text, "generation", None, "none"), None, "shared", 10)
        assert job.stop_probability(0) == 0.0 and 0.0 < job.stop_probability(1) < 1.0, request.text
