"""The body of `POST /v1/audio/speech` as vllm-omni 0.30.0 types it, and what moss serve does with
each of its fields.

`SpeechRequest` has the fields of vllm-omni's `OpenAICreateSpeechRequest` (vllm_omni/entrypoints/
openai/protocol/audio.py:58-347 in the 0.30.0 wheel) with their JSON types, aliases, defaults and
ranges, plus moss's extensions. `read_speech` turns a JSON body into one, or into a 400 naming the
field. Then each field is either honoured as vllm-omni honours it for MOSS-TTS-Local, or refused
with a 400 saying why (`refusals`); fields neither side knows are refused by name too, where
vllm-omni drops them (a typo must not pass silently). `record_of` turns the rest into the
values of a request (`Asked`), for the checks a request file's values pass (`make_request`).
docs/serve.md has the table, field by field.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from ..config.request_fields import SAMPLING_FIELDS, sampler_refusal
from ..validation import INT64_MAX, INT64_MIN
from ..vllm_omni import DEFAULT_VOICE, EXTRA_PARAMS, OPENAI_SAMPLING, STAGE0_SAMPLING
from .audio import STREAM_FORMATS
from .errors import ApiError, schema_error

Int64 = Annotated[int, Field(ge=INT64_MIN, le=INT64_MAX)]
# A seed, wherever a body gives one (`seed`, an item's `seed`, `extra_params.tts_local_seed`): vllm-omni's
# `int | None` in [-2**63, 2**63 - 1] (audio.py:160-166), read in pydantic's lax mode as vllm-omni reads it,
# so "7" is 7 and -1 is the seed -1 (docs/serve.md, "Seeds").
SEED = TypeAdapter(Int64 | None)
REFERENCE_KEYS = ("audio_path", "text")


class SpeechRequest(BaseModel):
    """vllm-omni's request, field for field (audio.py line numbers), then moss's extensions. Types
    coerce as vllm-omni's do (pydantic's lax mode: "5" is the seed 5). Unknown fields are kept
    aside (`model_extra`) to be refused by name."""

    model_config = ConfigDict(extra="allow")

    input: str  # 59
    model: str | None = None  # 60
    voice: str | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))  # 64-77
    instructions: str | None = None  # 79-82
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"  # 83
    sample_rate: Annotated[int, Field(gt=0)] | None = None  # 84-87
    speed: float | None = Field(1.0, ge=0.25, le=4.0)  # 88-92
    stream_format: Literal["sse", "audio"] | None = None  # 93-100
    stream: bool = False  # 101-109
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None  # 112-115
    language: str | None = None  # 116-119
    ref_audio: str | list[str] | None = None  # 120-123
    ref_text: str | None = None  # 124-127
    ref_audio_2: str | None = None  # 128-132
    ambient_sound: str | None = None  # 133-137
    duration_seconds: float | None = Field(None, ge=0.0)  # 138-142
    x_vector_only_mode: bool | None = None  # 143-146
    speaker_embedding: list[float] | list[list[float]] | None = Field(None, max_length=8192)  # 147-153
    max_new_tokens: int | None = Field(None, ge=1, le=INT64_MAX)  # 154-159
    seed: Int64 | None = None  # 160-166
    initial_codec_chunk_frames: int | None = Field(None, ge=0, le=INT64_MAX)  # 167-172
    non_streaming_mode: bool | None = None  # 173-180
    extra_params: dict[str, Any] | None = None  # 181-184
    word_timestamps: bool = False  # 185-195

    # moss's overrides of the audio sampler (vllm-omni has none: its sampler is fixed)
    audio_temperature: float | None = None
    audio_top_p: float | None = None
    audio_top_k: int | None = None
    audio_repetition_penalty: float | None = None

    @field_validator("voice", mode="before")
    @classmethod
    def _voice_object(cls, value: Any) -> Any:
        """`{"id": name}` names a voice as a string does."""
        if isinstance(value, dict):
            if "id" not in value:
                raise ValueError("a voice object needs an 'id'")
            return value["id"]
        return value

    @property
    def stream_mode(self) -> str | None:
        """How the answer is sent, as vllm-omni reads `stream` and `stream_format` (audio.py:327-334):
        "audio" (raw chunks, whatever `stream` says), "sse" (server-sent events: `stream: true`
        or `stream_format: "sse"`), or None (one body)."""
        if self.stream_format == "audio":
            return "audio"
        if self.stream or self.stream_format == "sse":
            return "sse"
        return None


KNOWN = (*SpeechRequest.model_fields, "speaker", "references")  # for a typo's "did you mean"


def read_speech(body: Any) -> SpeechRequest:
    """A JSON body as a SpeechRequest; ApiError 400 naming the field whose type or range is wrong."""
    if not isinstance(body, dict):
        raise ApiError(400, "the body must be a JSON object")
    try:
        return SpeechRequest.model_validate(_references(body))
    except ValidationError as e:
        raise schema_error(e.errors()) from None


def _references(body: dict) -> dict:
    """`references: [{audio_path, text}]`, vllm-omni's other spelling of ref_audio and ref_text
    (audio.py:228-274): one reference, not in conflict with them."""
    if body.get("references") is None:
        return {key: value for key, value in body.items() if key != "references"}
    body = dict(body)
    refs = body.pop("references")

    def refuse(why: str) -> ApiError:
        return ApiError(400, f"references: {why}", "references")

    if not isinstance(refs, list) or not refs:
        raise refuse("must be a non-empty list of {audio_path, text} objects")
    if len(refs) > 1:
        raise refuse(f"{len(refs)} references; MOSS-TTS-Local clones one voice (vllm-omni takes one too)")
    first = refs[0]
    if not isinstance(first, dict) or not isinstance(first.get("audio_path"), str) or not first["audio_path"]:
        raise refuse("the reference must be an object with a non-empty string 'audio_path' (and optionally 'text')")
    if unknown := sorted(set(first) - set(REFERENCE_KEYS)):
        raise refuse(f"unknown field(s) {', '.join(unknown)} in the reference; expected audio_path, text")
    if body.get("ref_audio") and body["ref_audio"] != first["audio_path"]:
        raise refuse("its audio_path and ref_audio differ; give one of them")
    body["ref_audio"] = first["audio_path"]
    text = first.get("text")
    if text is not None and not isinstance(text, str):
        raise refuse("the reference's 'text' must be a string")
    if text and text.strip():
        if body.get("ref_text") and body["ref_text"] != text:
            raise refuse("its text and ref_text differ; give one of them")
        body["ref_text"] = text
    return body


def refusals(speech: SpeechRequest, keys: set[str], sample_rate: int) -> list[tuple[str, str]]:
    """The fields moss serve does not honour, each with why: (param, reason). `keys` are the body's
    own keys (to name `speaker` where the body used that name); `sample_rate` is the codec's."""
    found: list[tuple[str, str]] = []

    def refuse(field: str, why: str) -> None:
        found.append((field, why))

    if speech.voice is not None and speech.voice.lower() != DEFAULT_VOICE:
        refuse(
            "speaker" if "speaker" in keys and "voice" not in keys else "voice",
            "moss serve has no named voices; vllm-omni reads a voice only to look up one uploaded to "
            "/v1/audio/voices and ignores other names for MOSS-TTS. Send the voice to clone as ref_audio",
        )
    if speech.response_format in ("mp3", "opus"):
        refuse(
            "response_format",
            f"moss serve writes lossless audio only (wav, pcm, flac), so the samples it sends are the samples it "
            f"made; not {speech.response_format}",
        )
    if speech.stream_mode is not None and speech.response_format not in STREAM_FORMATS:
        refuse("response_format", f"a stream sends wav or pcm, not {speech.response_format}")
    if speech.sample_rate is not None and speech.sample_rate != sample_rate:
        refuse(
            "sample_rate",
            f"the audio is the codec's {sample_rate} Hz; moss serve does not resample (vllm-omni refuses any "
            "sample_rate for MOSS-TTS)",
        )
    if speech.speed is not None and speech.speed != 1.0:
        refuse(
            "speed",
            "moss serve does not time-stretch, so its audio stays bitwise the audio the model made; only 1.0 "
            "(vllm-omni stretches a whole answer with a phase vocoder, and refuses speed for a stream)",
        )
    if speech.task_type not in (None, "Base"):
        refuse(
            "task_type",
            f"MOSS-TTS-Local has no {speech.task_type} task: it clones ref_audio's voice ('Base') or speaks "
            "without a reference",
        )
    if isinstance(speech.ref_audio, list):
        refuse("ref_audio", "one reference, as a string; MOSS-TTS-Local clones one voice (vllm-omni refuses a list)")
    for field, why in (
        ("ref_audio_2", "a second speaker's reference is for MOSS-TTSD; MOSS-TTS-Local speaks with one voice"),
        ("duration_seconds", "MOSS-SoundEffect's target length; max_new_tokens caps the frames (12.5 a second)"),
        ("speaker_embedding", "Qwen3-TTS's speaker vector; MOSS-TTS-Local clones from ref_audio"),
        ("initial_codec_chunk_frames", "streams follow the deploy file's chunk schedule"),
        ("non_streaming_mode", "a Qwen3-TTS prompt mode; MOSS-TTS-Local has none"),
    ):
        if getattr(speech, field) is not None:
            refuse(field, f"{why} (vllm-omni's MOSS-TTS-Local path does not read it)")
    if speech.x_vector_only_mode:
        refuse("x_vector_only_mode", "Qwen3-TTS's clone from a speaker vector; MOSS-TTS-Local uses the whole ref_audio")
    if speech.word_timestamps:
        refuse("word_timestamps", "moss serve has no forced aligner to time words (vllm-omni refuses it without one)")
    return found


@dataclass(frozen=True)
class Asked:
    """The request a body asks for, in moss's names (for `make_request`); its ref_audio is left to
    the server, which reads the media."""

    text: str
    seed: int | None
    max_new_frames: int | None
    prompt_fields: dict[str, Any]  # extra_params' values as JSON wrote them
    sampling: dict[str, float | int]
    ref_text: str | None


def record_of(speech: SpeechRequest) -> tuple[Asked, list[tuple[str, str]]]:
    """The request a body asks for, and the problems of the fields that do not map: unknown ones,
    extra_params moss does not take, conflicts."""
    named = {"instruction": speech.instructions, "language": speech.language, "ambient_sound": speech.ambient_sound}
    fields: dict[str, Any] = {name: value for name, value in named.items() if value is not None}
    seed = speech.seed
    problems: list[tuple[str, str]] = []
    for name, value in (speech.extra_params or {}).items():
        where = f"extra_params.{name}"
        if name in EXTRA_PARAMS:
            if name in fields and fields[name] != value:  # ambient_sound, given twice
                problems.append((name, f"{name} and {where} differ; give one of them"))
            fields[name] = value
        elif name == "tts_local_seed":  # the residual sampler's seed in vllm-omni; `seed` overrides it
            try:
                local_seed = SEED.validate_python(value)  # read as `seed` is: "7" is 7, null is none
            except ValidationError as e:
                problems.append((where, f"{e.errors()[0]['msg']} (a seed is a signed 64-bit integer), got {value!r}"))
                continue
            if local_seed is not None and speech.seed is not None and speech.seed != local_seed:
                problems.append((where, f"seed {speech.seed} and tts_local_seed {local_seed} differ; give one of them"))
            elif local_seed is not None:
                seed = local_seed
        elif name in STAGE0_SAMPLING:
            problems.append(
                (
                    where,
                    "vllm-omni sets it on stage 0, whose MOSS-TTS-Local logits are one-hot, so it changes no audio "
                    f"(modeling_moss_tts_talker.py:1398-1472); moss's audio sampler takes audio_{name}",
                )
            )
        else:
            problems.append((where, f"unknown field; expected one of {', '.join((*EXTRA_PARAMS, 'tts_local_seed'))}"))
    extra = speech.model_extra or {}
    for key in extra:
        if key == "speaker":  # `voice` took the value
            problems.append((key, "'voice' and 'speaker' are one field; give one of them"))
        elif key not in OPENAI_SAMPLING:
            hint = difflib.get_close_matches(key, KNOWN, n=1)
            problems.append((key, "unknown field" + (f"; did you mean {hint[0]!r}?" if hint else "")))
    # after the other problems, as a request file's check lists them: what vllm-omni does with each
    problems += [(key, sampler_refusal(key)) for key in extra if key in OPENAI_SAMPLING]
    sampling = {key: value for key in SAMPLING_FIELDS if (value := getattr(speech, key)) is not None}
    return Asked(speech.input, seed, speech.max_new_tokens, fields, sampling, speech.ref_text), problems
