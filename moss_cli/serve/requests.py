"""A JSON body -> a request the engine can run: vllm-omni's field types and moss's decision for
each field (`protocol`), the same field checks as a request file (`make_request`), the same
preparation as `moss synth` (`Synthesizer.prepare`: seed precedence, frame budget, prompt
length), plus the limits a server needs. Every problem is an ApiError naming the body's field."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.request_fields import Problem, Request, make_request
from ..config.requests import DEFAULT_MAX_LINE_BYTES, RequestFileError
from ..pipeline import Prepared, Synthesizer
from .errors import ApiError, body_field, invalid
from .media import reference_media
from .protocol import read_speech, record_of, refusals

# A reference longer than the prompt can hold is refused by the prompt-length check; this bounds
# the bytes read before that (a minute of 48 kHz stereo 16-bit WAV is 11 MB).
REF_AUDIO_BYTES = 32 << 20
TEXT_FIELDS = ("text", "ref_text", "instruction", "quality", "sound_event", "ambient_sound", "language")


@dataclass(frozen=True)
class Limits:
    body_bytes: int  # the whole JSON body (413)
    text_bytes: int  # the prompt's text fields together (413); shorter texts may still be too many tokens (400)
    ref_audio_bytes: int = REF_AUDIO_BYTES  # a reference's file size (413)

    @classmethod
    def of(cls, synth: Synthesizer, ref_audio_bytes: int = REF_AUDIO_BYTES) -> Limits:
        """From the model's max length, as request files are bounded: a text of more bytes than
        max_model_len tokens can spell cannot fit; a body may spell each byte as a JSON escape and
        carry the reference as base64."""
        limit = synth.deploy.max_model_len
        text = limit * synth.token_bytes if limit is not None else DEFAULT_MAX_LINE_BYTES
        return cls(synth.max_line_bytes + 4 * (ref_audio_bytes // 3 + 1), text, ref_audio_bytes)


@dataclass
class Ask:
    """A prepared request and what its body asked of the response."""

    prepared: Prepared
    response_format: str
    stream: str | None  # "audio" (raw chunks), "sse" (server-sent events) or None (one body)
    text_tokens: int  # of its text and instruction: the usage vllm-omni reports as input tokens
    reference_file: Path | None = None  # the private copy of its ref_audio (removed by `Intake.release`)


class Intake:
    def __init__(
        self, synth: Synthesizer, limits: Limits, *, model_name: str, allowed_media_dir: Path | None = None
    ) -> None:
        self.synth = synth
        self.limits = limits
        self.model_name = model_name
        self.allowed_media_dir = allowed_media_dir
        self._folder = tempfile.TemporaryDirectory(prefix="moss-serve-")  # private (0700): reference copies
        self.folder = Path(self._folder.name)

    def close(self) -> None:
        self._folder.cleanup()

    def prepare(self, body: Any) -> Ask:
        """Check a body and prepare its request (it may read and tokenize: call it off the event loop)."""
        speech = read_speech(body)
        self._check_model(speech.model)
        asked, problems = record_of(speech)
        problems = refusals(speech, set(body), self.synth.codec_config.sampling_rate) + problems
        self._check_text_size({"text": asked.text, "ref_text": asked.ref_text, **asked.prompt_fields})
        rid = f"req-{uuid.uuid4().hex}"  # the server's own id: never a name a body chose
        reference_file = None
        if isinstance(speech.ref_audio, str):
            media = reference_media(
                speech.ref_audio, allowed_dir=self.allowed_media_dir, limit=self.limits.ref_audio_bytes
            )
            reference_file = self.folder / f"{rid}{media.suffix}"
        found: list[Problem] = []  # every problem at once, as for a request file
        request = make_request(
            found,
            1,
            id=rid,
            text=asked.text,
            seed=asked.seed,
            max_new_frames=asked.max_new_frames,
            prompt_fields=asked.prompt_fields,
            sampling=asked.sampling,
            ref_audio=reference_file,
            ref_text=asked.ref_text,
        )
        problems += [(body_field(p.field), p.message) for p in found]
        if problems:
            raise invalid(problems)
        if reference_file is not None:
            fd = os.open(reference_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "wb") as handle:
                handle.write(media.data)
        try:
            prepared = self.synth.prepare([request])[0]
        except RequestFileError as e:
            if reference_file is not None:
                reference_file.unlink(missing_ok=True)
            hide = str(reference_file) if reference_file else None  # the server's paths are its own
            raise invalid(
                [(body_field(p.field), p.message.replace(hide, "ref_audio") if hide else p.message) for p in e.problems]
            ) from None
        return Ask(prepared, speech.response_format, speech.stream_mode, self._text_tokens(request), reference_file)

    def release(self, ask: Ask) -> None:
        """Forget the request's reference voice once its audio is done (a server's voices come and go)."""
        if ask.reference_file is not None:
            ask.reference_file.unlink(missing_ok=True)
        if ask.prepared.reference is not None:
            self.synth.voices.forget(ask.prepared.reference)

    def _check_model(self, model: str | None) -> None:
        if model and model != self.model_name:  # none or "" is the served model, as in vllm-omni
            raise ApiError(404, f"the model {model!r} does not exist; this server serves {self.model_name!r}", "model")

    def _text_tokens(self, request: Request) -> int:
        """Tokens of the text and the instruction, as vllm-omni counts input usage (speech_usage.py:90-146)."""
        texts = (request.text, request.prompt_fields.get("instruction") or "")
        return sum(len(self.synth.prompts.encode(text)) for text in texts if text.strip())

    def _check_text_size(self, texts: dict[str, Any]) -> None:
        sizes = {}
        for key in TEXT_FIELDS:
            if isinstance(texts.get(key), str):
                try:
                    sizes[key] = len(texts[key].encode("utf-8"))
                except UnicodeEncodeError:  # JSON can spell a lone surrogate; no tokenizer takes one
                    raise ApiError(400, "the text is not valid Unicode (a lone surrogate)", body_field(key)) from None
        if sum(sizes.values()) > self.limits.text_bytes:
            largest = max(sizes, key=sizes.get)
            raise ApiError(
                413,
                f"the text is {sum(sizes.values())} bytes, more than the {self.limits.text_bytes} the model's "
                "max_model_len can hold",
                body_field(largest),
            )
