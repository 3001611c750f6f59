"""A test double of vllm-omni 0.30.0's speech API serving MOSS-TTS-Local (a test helper, not a test).

It answers like `vllm serve OpenMOSS-Team/MOSS-TTS-Local-Transformer-v1.5 --omni` with the
moss_tts_local deploy file, so moss's `audit-determinism --server` and `synth --server` can be
tested without the real server. Written from the vllm-omni 0.30.0 wheel (`pip download --no-deps
vllm-omni==0.30.0`); the files named in parentheses are in its `vllm_omni` package:
entrypoints/openai/protocol/audio.py (request models), .../tts_adapters/moss_tts.py (validate,
build), .../serving_speech.py and api_server.py (routes, validation order, errors, streaming,
batch; with vLLM 0.30's error handlers and media fetching), worker/gpu_model_runner.py and
model_executor/models/moss_tts/ (sampling, generators), deploy/moss_tts_local.yaml, and the
codec config (configuration_moss_audio_tokenizer_v2.py). Nothing here is copied from vllm-omni.

- The request models mirror `OpenAICreateSpeechRequest`, `SpeechBatchItem` and
  `BatchSpeechRequest` field for field (audio.py), plain pydantic models, so unknown keys such as
  `temperature` are dropped silently.
- The routes validate in vllm-omni's order and answer its error JSON (serving_speech.py).
- The WebSocket route `/v1/audio/speech/stream` (api_server.py:1696-1715, serving_speech_stream.py)
  takes `StreamingSpeechSessionConfig` (audio.py:556-638) and the handler's messages, errors and
  timeouts; `split_granularity` "none" only. Each flushed utterance is the request the handler builds
  (serving_speech_stream.py:311-330: session.config's fields by name, `input` the stripped buffer,
  `stream` = stream_audio) run through the path of a non-streaming POST (`_generate_audio_bytes`,
  serving_speech.py:2140, 2624), so without stream_audio its audio frame is byte for byte the body of
  `POST /v1/audio/speech` with those fields, seed rule included.
- Behind them, `FakeMossLocalEngine` is a continuous-batching loop: each step makes one frame for
  every active row, drawing the stop gate and then 12 codes per row (gpu_model_runner.py). Where
  those random numbers come from is the point: a seeded request has its own generator; an unseeded one draws
  from ONE process-wide generator shared by all unseeded rows (`fixed=False`, vllm-omni 0.30.0)
  or from its own generator seeded with the deploy seed (`fixed=True`, after the fix).
- The audio is 48 kHz stereo int16 (codec config): a few sinusoids per frame whose pitches and
  levels come from the frame's codes, shaped by the text, reference audio, ref_text and language. A row's
  audio never depends on other rows except through the shared generator.
- `speak=True`: real words instead: espeak-ng reads the request's input (its pitch and rate set by the
  conditioning), each frame a 80 ms slice of that speech at a level set by the frame's first code; the
  gate stops when the words end. A different code changes the level, never the words.
- Servers whose arithmetic depends on the batch (`shared_steps`): "flip": a row's first code flips
  in every step it shares with other rows, as a GPU's kernels round a row differently at another
  batch shape (seeded rows alike; its random stream stays its own); "cut": the same, and a row whose
  first step is shared says only the first half of its words (`GenerationJob.cut`); "swap": the same, and
  such a row says one word of its text wrong (`SWAPPED` in its place); "rhythm": such a row says the same
  words in another rhythm and melody (`GenerationJob.altered` says which rows).

Run it with `serving_vllm_omni(engine)`, which yields the base URL of a server on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import io
import json
import math
import re
import struct
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from functools import lru_cache
from http import HTTPStatus
from typing import Annotated, Any, Literal
from urllib.parse import urlparse

import numpy as np
import soundfile as sf
from fastapi import Depends, FastAPI, HTTPException, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import AliasChoices, BaseModel, Field, ValidationError, field_validator, model_validator
from speech_servers import serving_app  # tests/ is on sys.path
from starlette.websockets import WebSocketState

SAMPLE_RATE = 48_000  # the codec's sampling_rate (codec config)
CHANNELS = 2
FRAME_SAMPLES = 3840  # samples per channel per frame: 12.5 frames/s (codec config)
N_VQ = 12  # codebooks per frame, Local v1.5 (gpu_model_runner.py)
CODEBOOK_SIZE = 1024
FIRST_CHUNK_FRAMES = 1  # deploy connector: initial_codec_chunk_frames (serving_speech.py, moss_tts_local.yaml)
CHUNK_FRAMES = 15  # deploy connector: codec_chunk_frames
DEFAULT_MODEL = "OpenMOSS-Team/MOSS-TTS-Local-Transformer-v1.5"
DEPLOY_SEED = 42  # stage-0 default_sampling_params.seed (moss_tts_local.yaml)
DEPLOY_MAX_TOKENS = 4096  # stage-0 default_sampling_params.max_tokens (moss_tts_local.yaml)
BATCH_MAX_ITEMS = 32  # tts_batch_max_items default (serving_speech.py)
REF_AUDIO_MIN_S = 1.0
REF_AUDIO_MAX_S = 30.0
START_TIMEOUT_S = 10.0

_INT64_MIN = -(2**63)
_INT64_MAX = 2**63 - 1

# ---------------------------------------------------------------------------------------------
# Request models (audio.py). Field names, annotations, defaults, constraints and aliases are those of
# vllm-omni's protocol/audio.py; test_vllm_omni_fixture.py checks them against the wheel.

SpeechSampleRate = Annotated[int, Field(gt=0)]

_REF_AUDIO_SCHEME_ERROR = "ref_audio must be a URL (http/https), base64 data URL (data:...), or file URI (file://...)"
_HIGGS_V2_RESERVED = ("messages", "reference_audio", "voice_prompt", "speaker_audio", "speakers")


class OpenAICreateSpeechRequest(BaseModel):
    input: str
    model: str | None = None
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = Field(default=None)
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"
    sample_rate: SpeechSampleRate | None = Field(default=None)
    speed: float | None = Field(default=1.0, ge=0.25, le=4.0)
    stream_format: Literal["sse", "audio"] | None = Field(default=None)
    stream: bool = Field(default=False)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = Field(default=None)
    language: str | None = Field(default=None)
    ref_audio: str | list[str] | None = Field(default=None)
    ref_text: str | None = Field(default=None)
    ref_audio_2: str | None = Field(default=None)
    ambient_sound: str | None = Field(default=None)
    duration_seconds: float | None = Field(default=None, ge=0.0)
    x_vector_only_mode: bool | None = Field(default=None)
    speaker_embedding: list[float] | list[list[float]] | None = Field(default=None, max_length=8192)
    max_new_tokens: int | None = Field(default=None, ge=1, le=_INT64_MAX)
    seed: int | None = Field(default=None, ge=_INT64_MIN, le=_INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=_INT64_MAX)
    non_streaming_mode: bool | None = Field(default=None)
    extra_params: dict[str, Any] | None = Field(default=None)
    word_timestamps: bool = Field(default=False)

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_id(cls, value: Any) -> Any:
        """`{"id": X}` means voice X (audio.py)."""
        if isinstance(value, dict):
            if "id" not in value:
                raise ValueError("voice dict must contain 'id'")
            return value["id"]
        return value

    @field_validator("ref_audio", mode="before")
    @classmethod
    def _ref_audio_str_or_list(cls, value: Any) -> Any:
        # TypeError is not turned into a validation error by pydantic: it reaches the app's
        # TypeError handler, a 400 BadRequestError, as in vllm-omni (audio.py, serving_speech.py).
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, (list, tuple)):
            if not all(isinstance(entry, str) for entry in value):
                raise TypeError("'ref_audio' list entries must be strings")
            if not value:
                raise ValueError("'ref_audio' list cannot be empty")
            return list(value)
        raise TypeError("'ref_audio' must be a string or list of strings")

    @field_validator("speaker_embedding")
    @classmethod
    def _finite_embedding(cls, value: Any) -> Any:
        if not value:
            return value
        vectors = value if isinstance(value[0], list) else [value]
        for vector in vectors:
            if not vector:
                raise ValueError("'speaker_embedding' nested vectors must be non-empty")
            if not all(math.isfinite(x) for x in vector):
                raise ValueError("'speaker_embedding' values must be finite (no NaN or Inf)")
        return value

    @model_validator(mode="before")
    @classmethod
    def _references_to_ref_audio(cls, data: Any) -> Any:
        """`references: [{audio_path, text}]` becomes ref_audio/ref_text (audio.py)."""
        if not isinstance(data, dict) or data.get("references") is None:
            return data
        refs = data["references"]
        if not isinstance(refs, list) or not refs:
            raise ValueError("'references' must be a non-empty array of {audio_path, text} objects")
        if len(refs) > 1:
            raise ValueError("'references' only supports a single reference; multi-shot voice clone is not supported")
        if not isinstance(refs[0], dict):
            raise ValueError("'references[0]' must be an object with 'audio_path' and optional 'text'")
        path = refs[0].get("audio_path")
        if not isinstance(path, str) or not path:
            raise ValueError(
                "'references[0].audio_path' is required and must be a string (URL, data: URI, or file path)"
            )
        if data.get("ref_audio") and data["ref_audio"] != path:
            raise ValueError("'references' and 'ref_audio' are mutually exclusive")
        data["ref_audio"] = path
        text = refs[0].get("text")
        if isinstance(text, str) and text.strip():
            if data.get("ref_text") and data["ref_text"] != text:
                raise ValueError("'references[0].text' and 'ref_text' conflict; supply only one")
            data["ref_text"] = text
        del data["references"]
        return data

    @model_validator(mode="before")
    @classmethod
    def _higgs_v2_reserved_keys(cls, data: Any) -> Any:
        """Only for Higgs Audio v2 model names; never for MOSS (audio.py)."""
        if not isinstance(data, dict) or not isinstance(data.get("model"), str):
            return data
        if "higgsaudiov2" not in data["model"].lower().replace("-", "").replace("_", ""):
            return data
        offending = sorted(key for key in _HIGGS_V2_RESERVED if key in data)
        if offending:
            raise ValueError(
                f"higgs_audio_v2 v1 does not support these rich-input fields: {offending}. "
                "Supply plain text via the 'input' field instead."
            )
        return data

    @model_validator(mode="after")
    def _embedding_excludes_ref_audio(self) -> OpenAICreateSpeechRequest:
        if self.speaker_embedding is not None and isinstance(self.ref_audio, str):
            raise ValueError("'speaker_embedding' and 'ref_audio' are mutually exclusive")
        return self

    def is_raw_audio_stream(self) -> bool:
        return self.stream_format == "audio"

    def is_sse_stream(self) -> bool:
        return (self.stream or self.stream_format == "sse") and not self.is_raw_audio_stream()

    def is_streaming(self) -> bool:
        return self.is_raw_audio_stream() or self.is_sse_stream()

    @model_validator(mode="after")
    def _streaming_needs_pcm_or_wav(self) -> OpenAICreateSpeechRequest:
        if self.is_streaming():
            if self.response_format not in ("pcm", "wav"):
                raise ValueError(
                    "Streaming (stream=true, stream_format='audio', or stream_format='sse') "
                    "requires response_format='pcm' or 'wav'. "
                    f"Got response_format='{self.response_format}'."
                )
            if self.speed is None:
                self.speed = 1.0
        return self


class SpeechBatchItem(BaseModel):
    input: str
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] | None = None
    sample_rate: SpeechSampleRate | None = None
    speed: float | None = Field(default=None, ge=0.25, le=4.0)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    max_new_tokens: int | None = Field(default=None, ge=1, le=_INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=_INT64_MAX)
    non_streaming_mode: bool | None = None


class BatchSpeechRequest(BaseModel):
    model: str | None = None
    items: list[SpeechBatchItem] = Field(..., min_length=1)
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"
    sample_rate: SpeechSampleRate | None = None
    speed: float | None = Field(default=1.0, ge=0.25, le=4.0)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    max_new_tokens: int | None = Field(default=None, ge=1, le=_INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=_INT64_MAX)
    non_streaming_mode: bool | None = None


class StreamingSpeechSessionConfig(BaseModel):
    model: str | None = None
    voice: str | None = Field(default=None, validation_alias=AliasChoices("voice", "speaker"))
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"
    speed: float | None = Field(default=1.0, ge=0.25, le=4.0)
    max_new_tokens: int | None = Field(default=None, ge=1, le=_INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(default=None, ge=0, le=_INT64_MAX)
    non_streaming_mode: bool | None = Field(default=None)
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = Field(default=None, max_length=8192)
    stream_audio: bool = Field(default=False)
    word_timestamps: bool = Field(default=False)
    seed: int | None = Field(default=None, ge=_INT64_MIN, le=_INT64_MAX)
    split_granularity: Literal["none", "sentence", "clause"] = Field(default="none")

    @model_validator(mode="after")
    def _streamed_audio_is_pcm_at_speed_1(self) -> StreamingSpeechSessionConfig:
        if self.stream_audio:
            if self.response_format != "pcm":
                raise ValueError(
                    "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. "
                    f"Got response_format='{self.response_format}'."
                )
            if self.speed is None:
                self.speed = 1.0
            elif self.speed != 1.0:
                raise ValueError(
                    "WebSocket stream_audio=true currently requires speed=1.0; "
                    "native speed control is only available through HTTP streaming."
                )
        return self


# ---------------------------------------------------------------------------------------------
# Engine stand-in (gpu_model_runner.py).


@dataclass(frozen=True)
class Conditioning:
    """What the talker's prompt holds for one request (moss_tts.py build()): the text it reads (ref_text +
    " " + input in continuation mode), the language tag and the decoded reference audio."""

    text: str
    mode: str  # "generation" | "continuation"
    language: str | None
    reference_sha256: str

    def key(self) -> bytes:
        return hashlib.sha256(
            json.dumps([self.text, self.mode, self.language, self.reference_sha256]).encode()
        ).digest()


class GenerationJob:
    """One request inside the engine. `chunks()` yields float32 [2, samples] arrays in the deploy's
    chunking (1 frame, then 15 frames each) and raises if the engine failed the request."""

    def __init__(
        self,
        cond: Conditioning,
        seed: int | None,
        rng_source: str,
        max_frames: int,
        spoken: str | None = None,
        min_frames: int = 1,
    ) -> None:
        self.conditioning = cond
        self.min_frames = min_frames  # the gate never stops before this frame (FakeMossLocalEngine.min_frames)
        self.spoken = spoken  # speak=True: the words it says (None: sinusoids)
        self.cut = False  # it said only the first half of its words (shared_steps="cut")
        self.altered: str | None = None  # how its words changed under load: "cut", "swap" or "rhythm"
        self.speech = None if spoken is None else espeak(spoken, *voice_of(cond.key()))
        self.seed = seed  # the generator's seed (None: the shared generator)
        self.rng_source = rng_source  # "request" | "deploy" | "shared"
        self.max_frames = max_frames
        self.rng: np.random.Generator | None = None if seed is None else np.random.default_rng(seed % 2**64)
        self.frames = 0  # frames with audio
        self.steps = 0  # talker steps (tokens out)
        self.codes: list[np.ndarray] = []  # the 12 codes of each frame with audio
        self.finish_reason: str | None = None  # "stop" | "length" | "error" | "cancelled"
        self.max_batch = 0  # the most rows that stepped together while this one ran
        self._key = cond.key()
        self._expected_frames = 4 + 0.75 * len(cond.text)
        self._pending: list[np.ndarray] = []
        self._queue: asyncio.Queue = asyncio.Queue()

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def stop_probability(self, frame: int) -> float:
        """The gate's chance to stop at this frame: rises with the frame index past a length set
        by the text (speaking: none before its words end, then at once); never before `min_frames`."""
        if self.speech is not None:
            words = -(-self.speech.shape[0] // FRAME_SAMPLES)
            return 0.0 if frame < words else 1.0
        if frame < self.min_frames:
            return 0.0
        return 1.0 / (1.0 + math.exp((self._expected_frames - frame) / 2.0))

    def say_half(self) -> None:
        """Say only the first half of its words (before its first frame)."""
        words = (self.spoken or "").split()
        if len(words) > 1:
            self.speech = espeak(" ".join(words[: len(words) // 2]), *voice_of(self._key))
            self.cut, self.altered = True, "cut"

    def say_otherwise(self, how: str) -> None:
        """Before its first frame: "swap": say one word of the middle of its text wrong (SWAPPED in its place);
        "rhythm": say the same words in another rhythm and melody (espeak-ng's rate and pitch moved)."""
        words = (self.spoken or "").split()
        pitch, rate = voice_of(self._key)
        if how == "swap" and len(words) > 2:
            words[len(words) // 2] = SWAPPED
            self.speech, self.altered = espeak(" ".join(words), pitch, rate), "swap"
        elif how == "rhythm" and words:
            self.speech, self.altered = espeak(" ".join(words), pitch + 25, rate + 25), "rhythm"

    def _flush(self) -> None:
        if self._pending:
            self._queue.put_nowait(np.concatenate(self._pending, axis=1))
            self._pending = []

    def _add_frame(self, codes: np.ndarray) -> None:
        self.codes.append(codes)
        if self.speech is not None:
            self._pending.append(speak_frame(self._key, self.speech, self.frames, codes))
        else:
            self._pending.append(render_frame(self._key, codes))
        self.frames += 1
        if self.frames == FIRST_CHUNK_FRAMES or (self.frames - FIRST_CHUNK_FRAMES) % CHUNK_FRAMES == 0:
            self._flush()

    def _finish(self, reason: str, error: BaseException | None = None) -> None:
        if self.done:
            return
        self.finish_reason = reason
        self._flush()
        self._queue.put_nowait(error)

    def cancel(self) -> None:
        """Leave the batch at the next step (the client went away); a no-op once finished."""
        self._finish("cancelled")

    async def chunks(self) -> AsyncIterator[np.ndarray]:
        try:
            while True:
                item = await self._queue.get()
                if item is None:
                    return
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            self.cancel()


def render_frame(key: bytes, codes: np.ndarray) -> np.ndarray:
    """float32 [2, FRAME_SAMPLES]: a deterministic function of the conditioning key and one frame's
    12 codes. Codes 0-3 set four pitches, 4-7 their levels, 8-11 their phases; the key shifts
    the pitches and the stereo balance."""
    shift = 1.0 + key[0] / 255.0 * 0.25
    balance = 0.8 + key[1] / 255.0 * 0.4
    t = np.arange(FRAME_SAMPLES, dtype=np.float64) / SAMPLE_RATE
    freqs = (80.0 + codes[0:4] * 0.9) * shift
    levels = 0.04 + codes[4:8] / CODEBOOK_SIZE * 0.1
    phases = codes[8:12] / CODEBOOK_SIZE * 2 * np.pi
    left = np.zeros(FRAME_SAMPLES)
    right = np.zeros(FRAME_SAMPLES)
    for f, a, p in zip(freqs, levels, phases):
        left += a * np.sin(2 * np.pi * f * t + p)
        right += a * balance * np.sin(2 * np.pi * f * 1.003 * t + p)
    return np.stack([left, right]).astype(np.float32)


SWAPPED = "purple"  # the word said in place of another under load (shared_steps="swap")


def voice_of(key: bytes) -> tuple[int, int]:
    """espeak-ng's pitch (0-99) and words per minute for a conditioning: another voice, another sound."""
    return 30 + key[0] % 40, 150 + key[1] % 30


@lru_cache(maxsize=256)
def espeak(text: str, pitch: int, rate: int) -> np.ndarray:
    """float32 [samples] at 48 kHz, peak 0.5: espeak-ng reading `text` (deterministic for its inputs),
    without the silence at either end."""
    with tempfile.TemporaryDirectory() as folder:
        path = f"{folder}/said.wav"
        subprocess.run(
            ["espeak-ng", "-v", "en-us", "-p", str(pitch), "-s", str(rate), "-w", path, text],
            check=True,
            capture_output=True,
            timeout=30,
        )
        said, rate_hz = sf.read(path, dtype="float32")
    said = said if said.ndim == 1 else said.mean(axis=1)
    loud = np.flatnonzero(np.abs(said) > 0.01 * float(np.abs(said).max()))
    said = said[loud[0] : loud[-1] + 1]  # without espeak-ng's silence at either end: a clip of speech
    times = np.arange(int(len(said) * SAMPLE_RATE / rate_hz)) / SAMPLE_RATE
    resampled = np.interp(times, np.arange(len(said)) / rate_hz, said)
    return (0.5 * resampled / max(float(np.abs(resampled).max()), 1e-6)).astype(np.float32)


def speak_frame(key: bytes, speech: np.ndarray, frame: int, codes: np.ndarray) -> np.ndarray:
    """float32 [2, FRAME_SAMPLES]: the frame's slice of the speech (silence past its end) at a level
    from its first code; the key sets the stereo balance."""
    part = np.zeros(FRAME_SAMPLES, dtype=np.float32)
    said = speech[frame * FRAME_SAMPLES : (frame + 1) * FRAME_SAMPLES]
    part[: said.shape[0]] = said
    level = 0.8 + 0.2 * codes[0] / CODEBOOK_SIZE
    balance = 0.8 + key[1] / 255.0 * 0.4
    return np.stack([level * part, level * balance * part]).astype(np.float32)


class FakeMossLocalEngine:
    """A continuous-batching stand-in for stage 0 + codec of MOSS-TTS-Local (gpu_model_runner.py).

    Requests join the running batch at step boundaries; each step makes one frame for every
    active row, drawing from the row's generator, in order, the stop gate and then the 12 codes,
    as `generate_frame` does. Generators:
    - a request with a seed (`seed`, else `extra_params.tts_local_seed`, serving_speech.py): its own, seeded
      with it, whatever else is in the batch;
    - an unseeded request with `fixed=False` (vllm-omni 0.30.0), or `deploy_seed=None`: ONE
      process-wide generator shared by all unseeded rows, drawn in batch order each step, so
      its audio depends on the batch and on everything that ran before;
    - an unseeded request with `fixed=True` (after the fix): its own, seeded with `deploy_seed`
      (the deploy file's stage-0 seed), so it equals the same request with `seed=deploy_seed`.

    A request ends when the gate says stop or after `max_new_tokens` frames (else `max_tokens`,
    the deploy's stage-0 cap): max_new_tokens is a cap, not a length, as in vllm-omni, where it
    only sets stage-0 max_tokens and the Local talker never reads max_new_frames (moss_tts.py).

    `speak`: real words (espeak-ng) instead of sinusoids; `shared_steps`: None (rows never change one
    another), "flip" (a row's first code flips in each step it shares: batch-dependent arithmetic)
    or "cut" (that, and a row whose first step is shared says half of its words).

    `fail_at_frame`: the engine fails every request when it reaches that frame (to test errors
    mid-stream). `received`/`received_batches` hold every JSON body posted to the speech and
    batch routes (as parsed from JSON, unknown fields included); `requests` the validated speech
    requests; `jobs` every request the engine ran.
    """

    def __init__(
        self,
        fixed: bool,
        deploy_seed: int | None = DEPLOY_SEED,
        max_tokens: int = DEPLOY_MAX_TOKENS,
        step_s: float = 0.002,
        *,
        fail_at_frame: int | None = None,
        speak: bool = False,
        shared_steps: str | None = None,
        min_frames: int = 1,
    ) -> None:
        self.fixed = fixed
        # The gate never stops before this frame. 1 (the default): every answer has audio. At 0 it may stop
        # at the first frame, an empty answer, as vllm-omni's can; but two empty answers of an unseeded request
        # are identical whatever its random stream, which a request drawing from the shared stream must not be
        # where a test counts on its variation (a short text's gate stopped there 3% of the time).
        self.min_frames = min_frames
        self.speak = speak
        self.shared_steps = shared_steps
        self.deploy_seed = deploy_seed
        self.max_tokens = max_tokens
        self.step_s = step_s
        self.fail_at_frame = fail_at_frame
        self.received: list[Any] = []
        self.received_batches: list[Any] = []
        self.requests: list[OpenAICreateSpeechRequest] = []
        self.jobs: list[GenerationJob] = []
        self.steps = 0
        self._shared_rng = np.random.default_rng()  # like the device's default RNG: nobody seeds it per request
        self._waiting: list[GenerationJob] = []
        self._active: list[GenerationJob] = []
        self._task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None

    def submit(
        self, cond: Conditioning, tts_local_seed: int | None, max_frames: int | None, spoken: str = ""
    ) -> GenerationJob:
        """Add a request (`spoken`: the words it says, where the engine speaks); it joins the batch
        at the next step. Call from the server's event loop."""
        if tts_local_seed is not None:
            seed, source = tts_local_seed, "request"
        elif self.fixed and self.deploy_seed is not None:
            seed, source = self.deploy_seed, "deploy"
        else:
            seed, source = None, "shared"
        spoken = spoken if self.speak else None
        job = GenerationJob(cond, seed, source, max_frames or self.max_tokens, spoken, self.min_frames)
        self.jobs.append(job)
        self._ensure_running()
        self._waiting.append(job)
        assert self._wake is not None
        self._wake.set()
        return job

    def _ensure_running(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._waiting, self._active = [], []
            self._wake = asyncio.Event()
            self._task = loop.create_task(self._run())

    async def stop(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
        for job in self._waiting + self._active:
            job._finish("error", RuntimeError("the engine stopped"))
        self._waiting, self._active = [], []

    async def _run(self) -> None:
        assert self._wake is not None
        while True:
            if not self._waiting and not self._active:
                self._wake.clear()
                await self._wake.wait()
            self._active += self._waiting
            self._waiting = []
            self._active = [job for job in self._active if not job.done]  # cancelled while waiting
            self.steps += 1
            shared = len(self._active) > 1
            for job in self._active:
                job.max_batch = max(job.max_batch, len(self._active))
                if shared and self.shared_steps == "cut" and job.steps == 0:
                    job.say_half()
                elif shared and self.shared_steps in ("swap", "rhythm") and job.steps == 0:
                    job.say_otherwise(self.shared_steps)
                try:
                    self._step(job, shared)
                except Exception as exc:  # a bug here fails the request instead of hanging it
                    job._finish("error", exc)
            self._active = [job for job in self._active if not job.done]
            await asyncio.sleep(self.step_s)

    def _step(self, job: GenerationJob, shared: bool = False) -> None:
        rng = job.rng if job.rng is not None else self._shared_rng
        draws = rng.random(1 + N_VQ)  # the gate, then codebooks 0..11, from one stream
        job.steps += 1
        if draws[0] < job.stop_probability(job.frames):
            job._finish("stop")  # the stop frame's codes were drawn, then dropped (gpu_model_runner.py)
            return
        if self.fail_at_frame is not None and job.frames >= self.fail_at_frame:
            job._finish("error", RuntimeError(f"the fake engine failed at frame {job.frames}"))
            return
        codes = np.minimum((draws[1:] * CODEBOOK_SIZE).astype(np.int64), CODEBOOK_SIZE - 1)
        if shared and self.shared_steps is not None:  # another batch shape rounds another way: a code flips
            codes[0] = (codes[0] + CODEBOOK_SIZE // 2) % CODEBOOK_SIZE
        job._add_frame(codes)
        if job.frames >= job.max_frames:
            job._finish("length")


# ---------------------------------------------------------------------------------------------
# Errors (serving_speech.py).


def _error(status: int, message: str, err_type: str, param: str | None = None) -> JSONResponse:
    body = {"error": {"message": _sanitize(message), "type": err_type, "param": param, "code": status}}
    return JSONResponse(body, status_code=status)


def _bad_request(message: str) -> JSONResponse:
    return _error(400, message, "BadRequestError")


def _sanitize(message: str) -> str:
    """Paths and object addresses become <path> / nothing, as vLLM's sanitize_message does."""
    message = re.sub(r" at 0x[0-9a-fA-F]+>", ">", message)
    message = re.sub(r"/(?:home|usr|opt|var|tmp|root|lib|mnt|srv)(?:/[\w.\-]+)+", "<path>", message)
    message = re.sub(r"(?:/[\w\-]+)+/[\w\-]+\.\w+", "<path>", message)
    return message.strip()


_PYDANTIC_KINDS = frozenset(
    {"function-after", "function-before", "function-wrap", "function-plain", "union", "tagged-union", "nullable",
     "default", "chain", "lax-or-strict", "json-or-python", "str", "int", "float", "bool", "list", "dict", "none"}
)  # fmt: skip


def _clean_loc(loc: Sequence[Any]) -> str:
    """('body', 'ref_audio', 'list[str]', 0) -> 'body.ref_audio.0': pydantic's schema-kind
    segments are not field names."""
    kept = [str(p) for p in loc if not re.search(r"[\[\](){}]", str(p)) and str(p).lower() not in _PYDANTIC_KINDS]
    return ".".join(kept or [str(p) for p in loc])


def _summarize(value: Any) -> Any:
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    text = value if isinstance(value, str) else str(value)
    return text if len(text) <= 200 else text[:200] + "...[truncated]"


def _validation_message(errors: Sequence[Any]) -> tuple[str, str | None]:
    """vLLM's 400 for a schema error: '{n} validation error(s):' then one line per error (at most
    10), each the error dict with its input summarised and its loc cleaned."""
    if not errors:
        return "Validation error", None
    param = None
    if isinstance(errors[0], dict) and errors[0].get("loc"):
        param = _clean_loc(errors[0]["loc"])
    label = "error" if len(errors) == 1 else "errors"
    lines = []
    for err in errors[:10]:
        if isinstance(err, dict):
            err = dict(err)
            if "input" in err:
                err["input"] = _summarize(err["input"])
            if isinstance(err.get("loc"), (list, tuple)):
                err["loc"] = _clean_loc(err["loc"])
        text = str(err)
        lines.append(text if len(text) <= 1000 else text[:1000] + "...[truncated]")
    message = f"{len(errors)} validation {label}:\n" + "".join(f"  {line}\n" for line in lines)
    if len(errors) > 10:
        message += f"  ...and {len(errors) - 10} more {label}\n"
    return message.rstrip(), param


def _is_json(raw_request: Request) -> bool:
    return raw_request.headers.get("content-type", "").lower().split(";", 1)[0] == "application/json"


# ---------------------------------------------------------------------------------------------
# Audio encoding (serving_speech.py, audio_utils_mixin.py, serving_speech.py).

_MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac", "mp3": "audio/mpeg", "opus": "audio/ogg"}


def streaming_wav_header(sample_rate: int = SAMPLE_RATE, channels: int = CHANNELS) -> bytes:
    """The 44-byte header vllm-omni sends before streamed WAV data: sizes unknown, 0xFFFFFFFF."""
    return (
        b"RIFF"
        + struct.pack("<I", 0xFFFFFFFF)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * channels * 2, channels * 2, 16)
        + b"data"
        + struct.pack("<I", 0xFFFFFFFF)
    )


def to_int16(audio: np.ndarray) -> np.ndarray:
    """float [channels, samples] -> int16 [samples, channels] (or [samples] for mono)."""
    scaled = np.clip(np.rint(np.asarray(audio, dtype=np.float64) * 32767.0), -32768, 32767).astype("<i2")
    return scaled.T if scaled.ndim == 2 else scaled


def stretch(audio: np.ndarray, speed: float) -> np.ndarray:
    """A stand-in for vllm-omni's phase-vocoder time stretch (which keeps the pitch): linear
    resampling of each channel to int(T/speed) samples, so the length matches vllm-omni's while
    the pitch moves."""
    if speed == 1.0:
        return audio
    length = audio.shape[-1]
    out_length = int(length / speed)
    if length == 0 or out_length == 0:
        return np.zeros(audio.shape[:-1] + (out_length,), dtype=np.float32)
    positions = np.linspace(0, length - 1, out_length)
    rows = np.atleast_2d(audio)
    result = np.stack([np.interp(positions, np.arange(length), row) for row in rows]).astype(np.float32)
    return result if audio.ndim == 2 else result[0]


def encode_audio(audio: np.ndarray, response_format: str, speed: float = 1.0) -> tuple[bytes, str]:
    """The whole file for a non-streaming answer. mp3 and opus are whatever this machine's
    libsndfile writes (MP3 / OGG OPUS at 48 kHz); if it cannot, the error becomes a 500 as in
    vllm-omni."""
    samples = to_int16(stretch(audio, speed))
    if response_format == "pcm":
        return samples.astype("<i2").tobytes(), _MEDIA_TYPES["pcm"]
    kinds = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "mp3": ("MP3", None), "opus": ("OGG", "OPUS")}
    container, subtype = kinds[response_format]
    with io.BytesIO() as buffer:
        sf.write(buffer, samples, SAMPLE_RATE, format=container, subtype=subtype)
        return buffer.getvalue(), _MEDIA_TYPES[response_format]


def _count_tokens(text: str | None) -> int:
    """A stand-in for the model's tokenizer: words and punctuation marks."""
    return len(re.findall(r"\w+|[^\w\s]", text or ""))


def _usage(request: OpenAICreateSpeechRequest, job: GenerationJob) -> dict[str, Any]:
    """SpeechTokenUsage (serving_speech.py): text tokens of input + instructions, audio tokens 0 for MOSS,
    output tokens the talker's steps."""
    text_tokens = _count_tokens(request.input)
    if request.instructions and request.instructions.strip():
        text_tokens += _count_tokens(request.instructions)
    return {
        "input_tokens": text_tokens,
        "output_tokens": job.steps,
        "total_tokens": text_tokens + job.steps,
        "input_token_details": {"text_tokens": text_tokens, "audio_tokens": 0},
    }


def _usage_headers(usage: dict[str, Any]) -> dict[str, str]:
    return {
        "X-VLLM-OMNI-INPUT-TOKENS": str(usage["input_tokens"]),
        "X-VLLM-OMNI-OUTPUT-TOKENS": str(usage["output_tokens"]),
        "X-VLLM-OMNI-TOTAL-TOKENS": str(usage["total_tokens"]),
        "X-VLLM-OMNI-INPUT-TEXT-TOKENS": str(usage["input_token_details"]["text_tokens"]),
        "X-VLLM-OMNI-INPUT-AUDIO-TOKENS": str(usage["input_token_details"]["audio_tokens"]),
    }


# ---------------------------------------------------------------------------------------------
# Serving (moss_tts.py, serving_speech.py).


class _SpeechService:
    def __init__(
        self,
        engine: FakeMossLocalEngine,
        served_names: tuple[str, ...],
        batch_max_items: int,
        ref_audio_urls: Mapping[str, bytes],
    ) -> None:
        self.engine = engine
        self.served_names = served_names
        self.batch_max_items = batch_max_items
        self.ref_audio_urls = dict(ref_audio_urls)

    def check_model(self, model: str | None) -> JSONResponse | None:
        if not model or model in self.served_names:
            return None
        return _error(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    @staticmethod
    def validate(request: OpenAICreateSpeechRequest) -> str | None:
        """The MOSS adapter's validate() for the local variant (moss_tts.py). Voices: no uploaded voices
        here, and an unknown voice is ignored for moss_tts."""
        if request.sample_rate is not None:
            return "sample_rate is not supported by the current TTS model"
        if not request.input or not request.input.strip():
            return "Input text cannot be empty"
        if request.ref_audio is None:
            return "MOSS-TTS-Local-Transformer requires 'ref_audio' (reference audio for voice cloning)."
        if not isinstance(request.ref_audio, str):
            return _REF_AUDIO_SCHEME_ERROR
        if (urlparse(request.ref_audio).scheme or "").lower() not in {"http", "https", "data", "file"}:
            return _REF_AUDIO_SCHEME_ERROR
        return None

    def _fetch(self, url: str) -> bytes:
        """vLLM's MediaConnector, as vllm-omni's server calls it with default options (moss_tts.py)."""
        if url[:5].lower() == "data:":
            spec, comma, data = url[5:].partition(",")
            if not comma:
                raise ValueError(f"Invalid data URL {url[:32]!r}: missing ',' separator.")
            _, semicolon, encoding = spec.rpartition(";")
            if not semicolon or encoding != "base64":
                raise NotImplementedError("Only base64 data URLs are supported for now.")
            return base64.b64decode(data, validate=True)  # binascii.Error is a ValueError: a 400
        scheme = urlparse(url).scheme.lower()
        if scheme == "file":
            # The server is started without --allowed-local-media-path.
            raise RuntimeError("Cannot load local files without `--allowed-local-media-path`.")
        if url in self.ref_audio_urls:
            return self.ref_audio_urls[url]
        # Nothing is fetched from here. Any other http(s) URL answers as a fetch that got a 4xx
        # does in vllm-omni (the documented path, moss_tts.py and serving_speech.py): vLLM turns it into
        # VLLMUnprocessableEntityError, which is not a ValueError, so the speech route answers
        # 500 "Speech generation failed: Failed to fetch media from URL: HTTP 404 error".
        raise _FetchError("Failed to fetch media from URL: HTTP 404 error")

    def _reference(self, url: str) -> str:
        """Fetch, decode (native rate, averaged to mono), check the length (moss_tts.py); the sha256 of
        the decoded reference."""
        raw = self._fetch(url)
        try:
            audio, rate = sf.read(io.BytesIO(raw), dtype="float32", always_2d=True)
        except sf.LibsndfileError as exc:
            # vLLM falls back from soundfile to PyAV, which raises this for an unknown format.
            raise ValueError("Invalid or unsupported audio file.") from exc
        mono = audio.mean(axis=1).astype(np.float32)
        duration = len(mono) / rate if rate > 0 else 0.0
        if duration < REF_AUDIO_MIN_S:
            raise ValueError(f"Reference audio too short ({duration:.1f}s). At least 1s of clear speech is required.")
        if duration > REF_AUDIO_MAX_S:
            raise ValueError(
                f"Reference audio too long ({duration:.1f}s). Maximum 30s supported \u2014 use a shorter clip."
            )
        return hashlib.sha256(int(rate).to_bytes(4, "little") + mono.tobytes()).hexdigest()

    async def start(self, request: OpenAICreateSpeechRequest) -> GenerationJob:
        """_prepare_speech_generation (serving_speech.py step 6): validate, build the prompt, plumb the seed,
        hand the request to the engine. ValueError -> 400, other exceptions -> 500."""
        problem = self.validate(request)
        if problem:
            raise ValueError(problem)
        assert isinstance(request.ref_audio, str)
        reference = await asyncio.to_thread(self._reference, request.ref_audio)
        language = request.language or None  # only a truthy language reaches the prompt
        if request.ref_text and request.ref_text.strip():
            cond = Conditioning(request.ref_text.strip() + " " + request.input, "continuation", language, reference)
        else:
            cond = Conditioning(request.input, "generation", language, reference)
        # extra_params all go to stage-0 extra_args, then request.seed overrides tts_local_seed;
        # the runner reads it with int() (serving_speech.py, gpu_model_runner.py). Where int() refuses,
        # the real runner fails inside the engine step; here only this request fails (a 500).
        seed_value = (request.extra_params or {}).get("tts_local_seed")
        if request.seed is not None:
            seed_value = request.seed
        seed = None if seed_value is None else int(seed_value)
        return self.engine.submit(cond, seed, request.max_new_tokens, request.input)

    async def collect(self, job: GenerationJob) -> np.ndarray:
        """The whole audio, float [2, T]; with no frames a mono array of 0 samples (serving_speech.py)."""
        try:
            pieces = [chunk async for chunk in job.chunks()]
        finally:
            job.cancel()
        return np.concatenate(pieces, axis=1) if pieces else np.zeros((0,), dtype=np.float32)

    async def byte_chunks(self, job: GenerationJob, response_format: str) -> AsyncIterator[bytes]:
        """The streamed body, one piece per engine chunk; for wav the header first, alone (serving_speech.py)."""
        header = response_format == "wav"
        try:
            async for chunk in job.chunks():
                if header:  # only with the first chunk: no audio, no header
                    header = False
                    yield streaming_wav_header()
                yield to_int16(chunk).astype("<i2").tobytes()
        finally:
            job.cancel()

    async def sse_events(
        self, job: GenerationJob, response_format: str, request: OpenAICreateSpeechRequest
    ) -> AsyncIterator[str]:
        emitted = False
        try:
            async for piece in self.byte_chunks(job, response_format):
                delta = {
                    "type": "speech.audio.delta",
                    "audio": base64.b64encode(piece).decode("ascii"),
                    "response_format": response_format,
                }
                emitted = True
                yield f"event: speech.audio.delta\ndata: {json.dumps(delta, separators=(',', ':'))}\n\n"
            done = {"type": "speech.audio.done", "usage": _usage(request, job)}
            yield f"event: speech.audio.done\ndata: {json.dumps(done, separators=(',', ':'))}\n\n"
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            error: dict[str, Any] = {"message": str(exc), "type": "server_error", "param": None, "code": 500}
            if emitted:
                error.update(partial_audio=True, action="discard")
            payload = {"type": "speech.audio.error", "error": error}
            yield f"event: speech.audio.error\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"

    async def speech(self, request: OpenAICreateSpeechRequest) -> Response:
        """create_speech (serving_speech.py step 4)."""
        if request.voice is not None and request.voice.lower() == "default":
            request.voice = None
        if request.sample_rate is not None:
            return _bad_request("sample_rate is not supported by the current TTS model")
        if (not_found := self.check_model(request.model)) is not None:
            return not_found
        if request.is_streaming() and request.word_timestamps:
            return _bad_request(
                "word_timestamps=true is currently supported by the WebSocket /v1/audio/speech/stream path. "
                "Use session.config with stream_audio=true and response_format='pcm'."
            )
        if request.word_timestamps:
            return _bad_request("word_timestamps=true requires the server to be launched with --forced-aligner.")
        if request.is_streaming() and request.speed is not None and request.speed != 1.0:
            label = "Streaming" if request.is_raw_audio_stream() else "SSE streaming"
            return _bad_request(
                f"{label} is not supported with speed adjustment. "
                "Use a non-streaming request or remove the speed parameter."
            )
        try:
            job = await self.start(request)
            if request.is_raw_audio_stream():
                return StreamingResponse(
                    self.byte_chunks(job, request.response_format), media_type=_MEDIA_TYPES[request.response_format]
                )
            if request.is_sse_stream():
                return StreamingResponse(
                    self.sse_events(job, request.response_format, request), media_type="text/event-stream"
                )
            audio = await self.collect(job)
            body, media_type = encode_audio(audio, request.response_format, request.speed or 1.0)
            return Response(body, media_type=media_type, headers=_usage_headers(_usage(request, job)))
        except ValueError as exc:
            return _bad_request(str(exc))
        except Exception as exc:
            return _error(500, f"Speech generation failed: {exc}", "InternalServerError")

    @staticmethod
    def merge(batch: BatchSpeechRequest, item: SpeechBatchItem) -> OpenAICreateSpeechRequest:
        """An item's own value where set, else the batch's; never a seed or extra_params (serving_speech.py)."""

        def pick(name: str) -> Any:
            value = getattr(item, name, None)
            return value if value is not None else getattr(batch, name, None)

        shared = ("voice", "instructions", "sample_rate", "task_type", "language", "ref_audio", "ref_text")
        shared += ("x_vector_only_mode", "max_new_tokens", "initial_codec_chunk_frames", "non_streaming_mode")
        speed = pick("speed")
        return OpenAICreateSpeechRequest(
            input=item.input,
            model=batch.model,
            response_format=pick("response_format") or "wav",
            speed=1.0 if speed is None else speed,
            stream=False,
            **{name: pick(name) for name in shared},
        )

    async def batch_item(self, index: int, request: OpenAICreateSpeechRequest) -> dict[str, Any]:
        problem = self.validate(request)
        if problem:
            return {"index": index, "status": "error", "error": problem}
        try:
            job = await self.start(request)
            audio = await self.collect(job)
            body, media_type = encode_audio(audio, request.response_format, request.speed or 1.0)
        except Exception as exc:
            return {"index": index, "status": "error", "error": str(exc)}
        return {
            "index": index,
            "status": "success",
            "audio_data": base64.b64encode(body).decode("ascii"),
            "media_type": media_type,
            "usage": _usage(request, job),
        }

    async def batch(self, batch: BatchSpeechRequest) -> Response:
        """create_speech_batch (serving_speech.py); the response as model_dump(exclude_none=True)."""
        if len(batch.items) > self.batch_max_items:
            raise HTTPException(
                400, f"Batch contains {len(batch.items)} items, exceeding the maximum of {self.batch_max_items}."
            )
        if (not_found := self.check_model(batch.model)) is not None:
            return not_found
        merged = [self.merge(batch, item) for item in batch.items]
        results = await asyncio.gather(*(self.batch_item(i, r) for i, r in enumerate(merged)))
        succeeded = sum(1 for r in results if r["status"] == "success")
        return JSONResponse(
            {
                "id": f"speech-batch-{uuid.uuid4().hex[:16]}",
                "results": results,
                "total": len(results),
                "succeeded": succeeded,
                "failed": len(results) - succeeded,
            }
        )

    def session_request(self, config: StreamingSpeechSessionConfig, text: str) -> OpenAICreateSpeechRequest:
        """The request an utterance generates with (serving_speech_stream.py:311-330): session.config's
        fields by name, `stream` from stream_audio, the flushed text as `input`. No sample_rate,
        stream_format or extra_params: session.config has none."""
        fields = ("model", "voice", "task_type", "language", "instructions", "speed", "max_new_tokens")
        fields += ("initial_codec_chunk_frames", "non_streaming_mode", "ref_audio", "ref_text", "x_vector_only_mode")
        fields += ("speaker_embedding", "word_timestamps", "seed")
        return OpenAICreateSpeechRequest(
            input=text,
            response_format=config.response_format or "wav",
            stream=config.stream_audio,
            **{name: getattr(config, name) for name in fields},
        )

    async def utterance(
        self, websocket: WebSocket, config: StreamingSpeechSessionConfig, text: str, utterance: int, sentence: int
    ) -> None:
        """One flushed text: audio.start, its audio, audio.done (serving_speech_stream.py:274-421). Without
        stream_audio it is `_generate_audio_bytes`, the non-streaming POST's path (serving_speech.py:2140,
        2624): the same bytes as POST /v1/audio/speech with those fields, in one binary frame; with it,
        the raw PCM chunks as they are decoded."""
        if config.word_timestamps:  # this server runs without --forced-aligner (serving_speech_stream.py:293-301)
            await _send_stream_error(
                websocket,
                "word_timestamps=true but the server was launched without --forced-aligner; either restart the "
                "server with that flag or set word_timestamps=false in session.config.",
            )
            return
        request = self.session_request(config, text)  # outside the try: a refusal here ends the session
        start = {"type": "audio.start", "utterance_index": utterance, "sentence_index": sentence}
        start.update(sentence_text=text, format=request.response_format)
        if config.stream_audio:
            start["sample_rate"] = 24_000  # the handler's nominal rate, whatever the model's (line 77, 339-342)
        await websocket.send_json(start)
        total, failed = 0, False
        try:
            self.engine.requests.append(request.model_copy(deep=True))
            job = await self.start(request)
            if config.stream_audio:
                async for piece in self.byte_chunks(job, "pcm"):
                    total += len(piece)
                    await websocket.send_bytes(piece)
            else:
                body, _ = encode_audio(await self.collect(job), request.response_format, request.speed or 1.0)
                total = len(body)
                await websocket.send_bytes(body)
        except WebSocketDisconnect:
            raise
        except Exception as exc:
            failed = True
            message = f"Generation failed for utterance {utterance}, sentence {sentence}: {exc}"
            await _send_stream_error(websocket, message, partial_audio=total > 0)
        finally:
            done = {"type": "audio.done", "utterance_index": utterance, "sentence_index": sentence}
            try:
                await websocket.send_json({**done, "total_bytes": total, "error": failed})
            except Exception:
                pass

    def session_config(self, message: dict[str, Any]) -> tuple[StreamingSpeechSessionConfig | None, str | None]:
        """A session.config message's model, or the error it answers (serving_speech_stream.py:258-272)."""
        try:
            config = StreamingSpeechSessionConfig(**{k: v for k, v in message.items() if k != "type"})
        except ValidationError as exc:
            return None, f"Invalid session config: {exc}"
        if config.model and config.model not in self.served_names:
            # vLLM's _check_model answer (an ErrorResponse), as str() prints it.
            info = f"message='The model `{config.model}` does not exist.', type='NotFoundError'"
            info += ", param='model', code=404"
            return None, f"error=ErrorInfo({info})"
        if config.split_granularity != "none":
            return None, "this double only models split_granularity='none'"  # not vllm-omni's: its limit
        return config, None

    async def session(self, websocket: WebSocket) -> None:
        """handle_session (serving_speech_stream.py:108-226): session.config first (within 10 s), then
        input.text chunks buffered until input.done, which synthesizes the stripped buffer as one request
        (split_granularity none: speech_text_splitter.py:195-202) and answers session.done; the connection
        stays open for the next utterance until session.close or 30 s without a message. An error before
        the first config ends the session; after it, only a failure outside generation does."""
        await websocket.accept()
        config: StreamingSpeechSessionConfig | None = None
        buffer, utterance, sentence, open_utterance = "", 0, 0, False
        try:
            while True:
                try:
                    raw = await asyncio.wait_for(
                        websocket.receive_text(), STREAM_CONFIG_TIMEOUT_S if config is None else STREAM_IDLE_TIMEOUT_S
                    )
                except asyncio.TimeoutError:
                    waited = "Timeout waiting for session.config" if config is None else "Idle timeout"
                    await _send_stream_error(websocket, waited + ("" if config is None else ": no message received"))
                    return
                message, problem = _stream_message(raw)
                if message is None:
                    await _send_stream_error(websocket, problem)
                    if config is None:
                        return
                    continue
                kind = message.get("type")
                if kind == "session.config":
                    if open_utterance:
                        await _send_stream_error(
                            websocket,
                            "session.config cannot be applied while an utterance is in progress; send input.done first",
                        )
                        continue
                    new_config, problem = self.session_config(message)
                    if new_config is None:
                        await _send_stream_error(websocket, problem)
                        if config is None:
                            return
                        continue
                    config = new_config
                elif config is None:
                    await _send_stream_error(websocket, f"Expected session.config, got: {kind}")
                    return
                elif kind == "input.text":
                    text = message.get("text", "")
                    if not isinstance(text, str):
                        await _send_stream_error(websocket, "input.text requires a string value")
                        continue
                    open_utterance = open_utterance or bool(text)
                    buffer += text
                elif kind == "input.done":
                    if buffer.strip():
                        await self.utterance(websocket, config, buffer.strip(), utterance, sentence)
                        sentence += 1
                    await websocket.send_json(
                        {"type": "session.done", "utterance_index": utterance, "total_sentences": sentence}
                    )
                    buffer, utterance, sentence, open_utterance = "", utterance + 1, 0, False
                elif kind == "session.close":
                    await websocket.close()
                    return
                else:
                    await _send_stream_error(websocket, f"Unknown message type: {kind}")
        except WebSocketDisconnect:
            pass
        except Exception as exc:  # e.g. a binary frame: receive_text() finds no text (KeyError 'text')
            await _send_stream_error(websocket, f"Internal error: {exc}")


STREAM_CONFIG_TIMEOUT_S = 10.0  # serving_speech_stream.py:75-76
STREAM_IDLE_TIMEOUT_S = 30.0
STREAM_CONFIG_MESSAGE_BYTES = 4 * 1024 * 1024  # serving_speech_stream.py:79-80 (characters, as len(raw))
STREAM_TEXT_MESSAGE_BYTES = 128 * 1024


def _stream_message(raw: str) -> tuple[dict[str, Any] | None, str | None]:
    """A client message, or why it is refused (serving_speech_stream.py:228-256)."""
    if len(raw) > STREAM_CONFIG_MESSAGE_BYTES:
        return None, "WebSocket message too large"
    try:
        message = json.loads(raw)
    except json.JSONDecodeError:
        return None, "Invalid JSON message"
    if not isinstance(message, dict):
        return None, "WebSocket messages must be JSON objects"
    if message.get("type") != "session.config" and len(raw) > STREAM_TEXT_MESSAGE_BYTES:
        return None, "input.text message too large"  # whatever the type
    return message, None


async def _send_stream_error(websocket: WebSocket, message: str, *, partial_audio: bool = False) -> None:
    payload: dict[str, Any] = {"type": "error", "message": message}
    if partial_audio:
        payload.update(partial_audio=True, action="discard")
    try:
        await websocket.send_json(payload)
    except Exception:
        pass  # the client is gone


class _FetchError(Exception):
    """vLLM's VLLMUnprocessableEntityError for a reference URL that answered 4xx."""


def make_vllm_omni_app(
    engine: FakeMossLocalEngine,
    *,
    served_model_name: str | Sequence[str] = DEFAULT_MODEL,
    model_path: str = DEFAULT_MODEL,
    max_model_len: int = 4096,
    batch_max_items: int = BATCH_MAX_ITEMS,
    ref_audio_urls: Mapping[str, bytes] | None = None,
    streaming_speech_available: bool = True,
) -> FastAPI:
    """The speech routes of `vllm serve ... --omni` for MOSS-TTS-Local (api_server.py).

    served_model_name: the --served-model-name value(s) (default: the model path); model_path:
    the model as /v1/models reports it (`root`); ref_audio_urls: http(s) reference URLs this
    server can "fetch", with their bytes (any other http(s) URL fails as a 404 fetch would);
    streaming_speech_available: False answers the WebSocket route as a deploy without its handler does.
    """
    names = (served_model_name,) if isinstance(served_model_name, str) else tuple(served_model_name)
    service = _SpeechService(engine, names, batch_max_items, ref_audio_urls or {})

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await engine.stop()

    app = FastAPI(lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def schema_error(raw_request: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_message(exc.errors())
        return _error(400, message, HTTPStatus.BAD_REQUEST.phrase, param)

    @app.exception_handler(HTTPException)
    async def http_error(raw_request: Request, exc: HTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail), HTTPStatus(exc.status_code).phrase)

    async def client_error(raw_request: Request, exc: Exception) -> JSONResponse:
        # vLLM's fallback for raw ValueError/TypeError/OverflowError: 400 BadRequestError.
        return _bad_request(str(exc))

    for kind in (ValueError, TypeError, OverflowError):
        app.add_exception_handler(kind, client_error)

    async def require_json(raw_request: Request) -> None:
        """vLLM's validate_json_request (serving_speech.py step 2). FastAPI has read the body by now (malformed
        JSON was refused before this runs) and has yet to validate it: record it here, so the
        bodies that fail validation are recorded too."""
        if not _is_json(raw_request):
            raise RequestValidationError(["Unsupported Media Type: Only 'application/json' is allowed"])
        body = await raw_request.json()
        if raw_request.url.path == "/v1/audio/speech":
            engine.received.append(body)
        else:
            engine.received_batches.append(body)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "healthy"})

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        now = int(time.time())
        permission = {
            "object": "model_permission",
            "created": now,
            "allow_create_engine": False,
            "allow_sampling": True,
            "allow_logprobs": True,
            "allow_search_indices": False,
            "allow_view": True,
            "allow_fine_tuning": False,
            "organization": "*",
            "group": None,
            "is_blocking": False,
        }
        cards = [
            {
                "id": name,
                "object": "model",
                "created": now,
                "owned_by": "vllm",
                "root": model_path,
                "parent": None,
                "max_model_len": max_model_len,
                "permission": [{"id": f"modelperm-{uuid.uuid4().hex[:16]}", **permission}],
            }
            for name in names
        ]
        return JSONResponse({"object": "list", "data": cards})

    @app.post("/v1/audio/speech", dependencies=[Depends(require_json)])
    async def create_speech(request: OpenAICreateSpeechRequest) -> Response:
        engine.requests.append(request.model_copy(deep=True))
        return await service.speech(request)

    @app.post("/v1/audio/speech/batch", dependencies=[Depends(require_json)])
    async def create_speech_batch(request: BatchSpeechRequest) -> Response:
        return await service.batch(request)

    @app.websocket("/v1/audio/speech/stream")
    async def streaming_speech(websocket: WebSocket) -> None:
        """api_server.py:1696-1715: without a handler (a pure-diffusion or duplex deploy leaves it None:
        api_server.py:851, 620-660) one error, then the socket closes."""
        if not streaming_speech_available:
            await websocket.accept()
            await websocket.send_json({"type": "error", "message": "Streaming speech is not available"})
            await websocket.close()
            return
        try:
            await service.session(websocket)
        finally:  # as the wheel's newer server stack does when an endpoint returns; older releases leave it open
            if websocket.application_state == WebSocketState.CONNECTED:
                await websocket.close()

    return app


@contextmanager
def serving_vllm_omni(engine: FakeMossLocalEngine, **app_options: Any) -> Iterator[str]:
    """Run the fake vllm-omni server in a thread on 127.0.0.1 (a port bound before it starts);
    yield its base URL; stop it within a bounded wait on exit. `app_options` go to
    make_vllm_omni_app."""
    with serving_app(make_vllm_omni_app(engine, **app_options), lifespan="on", start_timeout=START_TIMEOUT_S) as url:
        yield url


def reference_wav(seconds: float = 2.0, rate: int = 24_000, channels: int = 1, pitch: float = 220.0) -> bytes:
    """A WAV file to use as reference audio: a tone."""
    t = np.arange(int(round(seconds * rate))) / rate
    tone = 0.3 * np.sin(2 * np.pi * pitch * t)
    data = np.repeat(tone[:, None], channels, axis=1)
    with io.BytesIO() as buffer:
        sf.write(buffer, data, rate, format="WAV", subtype="PCM_16")
        return buffer.getvalue()


def data_url(wav: bytes, media_type: str = "audio/wav") -> str:
    """A base64 data: URL, as clients send ref_audio inline."""
    return f"data:{media_type};base64,{base64.b64encode(wav).decode('ascii')}"


__all__ = [
    "BatchSpeechRequest",
    "Conditioning",
    "FakeMossLocalEngine",
    "GenerationJob",
    "OpenAICreateSpeechRequest",
    "SpeechBatchItem",
    "StreamingSpeechSessionConfig",
    "data_url",
    "make_vllm_omni_app",
    "reference_wav",
    "serving_vllm_omni",
    "streaming_wav_header",
]
