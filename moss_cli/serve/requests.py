"""A JSON body -> a request the engine can run: the same field checks as a request file
(`speech_api.record_from_body` + `validate_record`), the same preparation as `moss synth`
(`Synthesizer.prepare`: seed precedence, frame budget, prompt length), plus the limits a server
needs. Every problem is an ApiError naming the body's field."""

from __future__ import annotations

import os
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.request_fields import Problem, validate_record
from ..config.requests import DEFAULT_MAX_LINE_BYTES, RequestFileError
from ..pipeline import Prepared, Synthesizer
from ..speech_api import RESPONSE_FORMATS, record_from_body
from .audio import STREAM_FORMATS
from .errors import ApiError, body_field, invalid
from .media import reference_media

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
    stream: bool
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

    def prepare(self, body: dict[str, Any]) -> Ask:
        """Check a body and prepare its request (it may read and tokenize: call it off the event loop)."""
        response_format, stream = self._response(body)
        record, problems = record_from_body(body)
        self._check_text_size(record)
        rid = f"req-{uuid.uuid4().hex}"  # the server's own id: never a name a body chose
        media = None
        if body.get("ref_audio") is not None:
            media = reference_media(
                body["ref_audio"], allowed_dir=self.allowed_media_dir, limit=self.limits.ref_audio_bytes
            )
            record["ref_audio"] = str(self.folder / f"{rid}{media.suffix}")
        found: list[Problem] = []  # every problem at once, as for a request file
        request = validate_record({**record, "id": rid}, 1, "body", found, self.folder)
        problems += [(body_field(p.field), p.message) for p in found]
        if problems:
            raise invalid(problems)
        reference_file = Path(record["ref_audio"]) if media is not None else None
        if media is not None:
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
        return Ask(prepared, response_format, stream, reference_file)

    def release(self, ask: Ask) -> None:
        """Forget the request's reference voice once its audio is done (a server's voices come and go)."""
        if ask.reference_file is not None:
            ask.reference_file.unlink(missing_ok=True)
        if ask.prepared.reference is not None:
            self.synth.voices.forget(ask.prepared.reference)

    def _response(self, body: dict[str, Any]) -> tuple[str, bool]:
        model = body.get("model")
        if model is not None and model != self.model_name:
            message = f"the model {model!r} does not exist; this server serves {self.model_name!r}"
            raise ApiError(404, message, "model", "model_not_found")
        response_format = body.get("response_format") or "wav"
        if response_format not in RESPONSE_FORMATS:
            raise ApiError(
                400,
                f"unsupported response_format {response_format!r}; expected {', '.join(RESPONSE_FORMATS)}",
                "response_format",
            )
        stream = bool(body.get("stream"))
        if stream and response_format not in STREAM_FORMATS:
            formats = " or ".join(STREAM_FORMATS)
            raise ApiError(400, f"streaming sends {formats}, not {response_format}", "response_format")
        if body.get("stream_format") not in (None, "audio"):
            raise ApiError(400, "only stream_format 'audio' (raw chunks) is served", "stream_format")
        return response_format, stream

    def _check_text_size(self, record: dict[str, Any]) -> None:
        sizes = {}
        for key in TEXT_FIELDS:
            if isinstance(record.get(key), str):
                try:
                    sizes[key] = len(record[key].encode("utf-8"))
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
