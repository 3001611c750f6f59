"""The OpenAI-compatible speech API that vllm-omni serves (`POST /v1/audio/speech`), as moss
speaks it: which request-file field travels in which JSON field, and the response headers by
which `moss serve` tells an auditor what it did. The HTTP clients (`audit-determinism --server`,
`synth --server`) write bodies with `body_from_request`; `moss serve` reads them with
`serve.protocol` (vllm-omni's request model and moss's decision for each of its fields).

The field names follow vllm-omni's protocol (`vllm_omni/entrypoints/openai/protocol/audio.py`,
`docs/serving/speech_api.md`): `max_new_tokens` counts codec frames for MOSS-TTS, `seed` is the
request seed that becomes the residual sampler's `tts_local_seed`, and `extra_params` carries
model-specific prompt fields that have no field of their own.
"""

from __future__ import annotations

import base64
import mimetypes
from pathlib import Path
from typing import Any

from .config.request_fields import SAMPLING_FIELDS, Request
from .vllm_omni import DROPPED_INSTRUCTION, DROPPED_PROMPT, DROPPED_SAMPLER, EXTRA_PARAMS

SPEECH_PATH = "/v1/audio/speech"
BATCH_PATH = "/v1/audio/speech/batch"  # several requests in one body; the batch answers each in a result
STREAM_PATH = "/v1/audio/speech/stream"  # a WebSocket: text in chunks, audio per utterance (speech_stream.py)
MODELS_PATH = "/v1/models"
HEALTH_PATH = "/health"
ENVIRONMENT_PATH = "/moss/environment"  # moss serve only: what its engine computes with
RESPONSE_FORMATS = ("wav", "pcm", "flac")  # what moss serve answers; vllm-omni also has mp3 and opus
MEDIA_TYPES = {"wav": "audio/wav", "pcm": "audio/pcm", "flac": "audio/flac"}

# Response headers of `moss serve` (a vllm-omni server sends none of them; an auditor then
# relies on the audio alone). Lower case, as HTTP/2 and httpx give them back.
HEADER_SEED = "x-moss-seed"  # the effective seed, or "none"
HEADER_SEED_SOURCE = "x-moss-seed-source"  # request | deploy | none
HEADER_FRAMES = "x-moss-frames"
HEADER_CODES_SHA256 = "x-moss-codes-sha256"
HEADER_MAX_IN_FLIGHT = "x-moss-max-in-flight"  # most requests in the engine's batch while it ran
HEADER_STOP_REASON = "x-moss-stop-reason"  # stop | max_frames | empty
HEADER_SAMPLE_RATE = "x-moss-sample-rate"
HEADER_CHANNELS = "x-moss-channels"  # interleaved channels of a `pcm` body
HEADER_REQUEST_ID = "x-request-id"  # the id moss serve gave the request (its logs use it)


# Request-file fields a vllm-omni 0.30.0 MOSS-TTS-Local server drops without a word, and why (vllm_omni.py).
DROPPED_BY_SERVER = {
    **{name: DROPPED_SAMPLER for name in SAMPLING_FIELDS},
    "instruction": DROPPED_INSTRUCTION,
    **{name: DROPPED_PROMPT for name in EXTRA_PARAMS},
}


def dropped_fields(request: Request) -> list[str]:
    """The fields of `request` that a vllm-omni MOSS-TTS-Local server would drop (see DROPPED_BY_SERVER)."""
    given = {**request.prompt_fields, **request.sampling}
    return [name for name in DROPPED_BY_SERVER if given.get(name) is not None]


def batch_item_lacks(request: Request) -> list[str]:
    """The request-file fields of `request` that an item of vllm-omni 0.30.0's batch route cannot
    carry. Its `SpeechBatchItem` (protocol/audio.py:446-463) has a single request's fields without
    `seed`, `extra_params` or sampling fields, and an item is merged into a speech request with no
    seed (serving_speech.py:2736-2765): every batch item is unseeded, and gets the deploy seed only
    after the deploy-seed fix."""
    lacks = ["seed"] if request.seed is not None else []
    given = {**request.prompt_fields, **request.sampling}
    return lacks + [name for name in (*EXTRA_PARAMS, *SAMPLING_FIELDS) if given.get(name) is not None]


# The fields of vllm-omni 0.30.0's session.config (`StreamingSpeechSessionConfig`, protocol/audio.py:556-638) that
# its WebSocket handler copies, by name, into the request each utterance generates with
# (serving_speech_stream.py:311-330); `stream_audio` becomes the request's `stream`. `split_granularity`
# stays with the session; `type` names the message.
SESSION_REQUEST_FIELDS = (
    "model",
    "voice",
    "task_type",
    "language",
    "instructions",
    "response_format",
    "speed",
    "max_new_tokens",
    "initial_codec_chunk_frames",
    "non_streaming_mode",
    "ref_audio",
    "ref_text",
    "x_vector_only_mode",
    "speaker_embedding",
    "word_timestamps",
    "seed",
)


def session_config(body: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """A speech request's body (`body_from_request`) as the session.config whose utterances, with the
    body's `input` as their text and split_granularity "none", generate the same request; and the
    body's fields a session.config cannot carry (vllm-omni's handler has no `extra_params` or
    sampling fields: such a request cannot go through the stream unchanged)."""
    config = {"type": "session.config", "split_granularity": "none"}
    config.update({key: value for key, value in body.items() if key in SESSION_REQUEST_FIELDS})
    return config, [key for key in body if key not in SESSION_REQUEST_FIELDS and key != "input"]


def session_lacks(request: Request) -> list[str]:
    """What of `request` an utterance of vllm-omni 0.30.0's WebSocket stream cannot carry unchanged:
    the fields session.config has no place for (see `session_config`), and a text with whitespace at
    either end, which the handler strips before it becomes the utterance's input
    (speech_text_splitter.py:195-201), so the utterance would be another request."""
    given = {**request.prompt_fields, **request.sampling}
    lacks = [name for name in (*EXTRA_PARAMS, *SAMPLING_FIELDS) if given.get(name) is not None]
    if request.text != request.text.strip():
        lacks.append("input with whitespace at either end")
    return lacks


def batch_body(bodies: list[dict[str, Any]], *, model: str | None, response_format: str) -> dict[str, Any]:
    """One call of the batch route: each single body an item, without its seed (a `SpeechBatchItem`
    has none: protocol/audio.py:446-463) and without what the batch decides for every item, its model
    and format."""
    batch: dict[str, Any] = {"response_format": response_format}
    if model is not None:
        batch["model"] = model
    batch["items"] = [
        {key: value for key, value in body.items() if key not in batch and key != "seed"} for body in bodies
    ]
    return batch


def data_uri(path: Path) -> str:
    """A reference audio file as a base64 `data:` URI (how vllm-omni accepts inline audio)."""
    known = {".wav": "audio/wav", ".flac": "audio/flac", ".mp3": "audio/mpeg", ".ogg": "audio/ogg"}
    media = known.get(path.suffix.lower()) or mimetypes.guess_type(path.name)[0] or "application/octet-stream"
    return f"data:{media};base64,{base64.b64encode(path.read_bytes()).decode('ascii')}"


def body_from_request(
    request: Request,
    *,
    model: str | None = None,
    response_format: str = "wav",
    seed: int | None = None,
    with_seed: bool = True,
) -> dict[str, Any]:
    """The JSON body that asks a server for one request of a requests file. `seed` replaces the
    request's own seed (the audit's probes); `with_seed=False` sends none at all."""
    body: dict[str, Any] = {"input": request.text, "response_format": response_format}
    if model is not None:
        body["model"] = model
    if request.max_new_frames is not None:
        body["max_new_tokens"] = request.max_new_frames
    chosen = seed if seed is not None else request.seed
    if with_seed and chosen is not None:
        body["seed"] = chosen
    fields = request.prompt_fields
    if fields.get("instruction") is not None:
        body["instructions"] = fields["instruction"]
    if fields.get("language") is not None:
        body["language"] = fields["language"]
    extra = {key: fields[key] for key in EXTRA_PARAMS if fields.get(key) is not None}
    if extra:
        body["extra_params"] = extra
    body.update(request.sampling)
    if request.ref_audio is not None:
        body["ref_audio"] = data_uri(request.ref_audio)
    if request.ref_text is not None:
        body["ref_text"] = request.ref_text
    return body
