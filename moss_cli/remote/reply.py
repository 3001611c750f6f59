"""A server's answer to one speech request: its audio as the int16 samples a file would store,
and what `moss serve`'s headers say about it (a vllm-omni server sends none of them).

Bodies come in the shapes vllm-omni 0.30.0 sends (paths: the vllm_omni package of its wheel):
a WAV file at any rate and channel count, headerless `pcm`, FLAC; a raw stream (`stream_format:
"audio"`) whose WAV header gives 0xFFFFFFFF sizes (entrypoints/openai/serving_speech.py:125-163);
or server-sent events (`stream: true`): `speech.audio.delta` events with base64 `audio` (for wav,
the first one only the header), then `speech.audio.done` or `speech.audio.error`
(serving_speech.py:1817-1890)."""

from __future__ import annotations

import base64
import io
import json
import struct
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

from .. import speech_api
from ..config.effective import SeedSource
from ..config.requests import Request
from ..io.audio import pcm_sha256
from ..io.outcome import Outcome


class NotAudio(ValueError):
    """A body that does not decode as the audio asked for; the message says what it is instead."""


@dataclass
class Reply:
    request: str  # the request's id
    context: str  # where it was sent from, e.g. "concurrent/concurrent-8"
    pcm: np.ndarray  # int16 [samples, channels]
    sample_rate: int
    headers: dict[str, str] = field(default_factory=dict)  # the x-moss-* ones
    sent_s: float = 0.0  # when it was sent, from the start of its run
    wall_s: float = 0.0  # from sending to the whole body received
    attempts: int = 1
    in_flight: int = 1  # the most of this client's requests in flight at once while it was
    # read as it came (`SpeechClient.speak(timed=True)`): (seconds from sending, body bytes so far) per piece
    arrivals: list[tuple[float, int]] | None = None

    @property
    def channels(self) -> int:
        return int(self.pcm.shape[1])

    @property
    def pcm_sha256(self) -> str:
        return pcm_sha256(self.pcm)

    def _int(self, name: str) -> int | None:
        try:
            return int(self.headers[name])
        except (KeyError, ValueError):
            return None

    @property
    def seed(self) -> int | None:
        return self._int(speech_api.HEADER_SEED)

    @property
    def seed_source(self) -> str | None:
        return self.headers.get(speech_api.HEADER_SEED_SOURCE)

    @property
    def frames(self) -> int | None:
        return self._int(speech_api.HEADER_FRAMES)

    @property
    def codes_sha256(self) -> str | None:
        return self.headers.get(speech_api.HEADER_CODES_SHA256)

    @property
    def server_in_flight(self) -> int | None:
        return self._int(speech_api.HEADER_MAX_IN_FLIGHT)

    @property
    def stop_reason(self) -> str | None:
        return self.headers.get(speech_api.HEADER_STOP_REASON)

    @property
    def server_id(self) -> str | None:
        """The id the server gave the request (moss serve's logs use it)."""
        return self.headers.get(speech_api.HEADER_REQUEST_ID)

    def outcome(self, request: Request, seed: int | None, content: dict | None = None) -> Outcome:
        """What the request produced, as the manifest and the audit keep it: the audio, and what
        `moss serve`'s headers say (None where the server says nothing). `seed`: the one sent."""
        return Outcome(
            id=request.id,
            pcm=self.pcm,
            sample_rate=self.sample_rate,
            pcm_sha256=self.pcm_sha256,
            seed_source=self.seed_source or (SeedSource.REQUEST if seed is not None else SeedSource.UNKNOWN),
            seed=self.seed if self.seed is not None else seed,
            text=request.text,
            frames=self.frames,
            codes_hash=self.codes_sha256,
            batch_size_seen=self.server_in_flight,
            wall_s=self.wall_s,
            stop_reason=self.stop_reason or ("empty" if self.pcm.shape[0] == 0 else None),
            sampling=request.sampling,
            content=content or {},
        )


MOSS_HEADERS = (
    speech_api.HEADER_SEED,
    speech_api.HEADER_SEED_SOURCE,
    speech_api.HEADER_FRAMES,
    speech_api.HEADER_CODES_SHA256,
    speech_api.HEADER_MAX_IN_FLIGHT,
    speech_api.HEADER_STOP_REASON,
    speech_api.HEADER_SAMPLE_RATE,
    speech_api.HEADER_CHANNELS,
    speech_api.HEADER_REQUEST_ID,
)


def moss_headers(headers) -> dict[str, str]:
    return {name: headers[name] for name in MOSS_HEADERS if name in headers}


def item_headers(result: dict) -> dict[str, str]:
    """What `moss serve` says of a batch item, as the headers of a single answer: each x-moss-*
    header is an item's `moss_*` key (x-moss-seed-source: moss_seed_source; x-request-id:
    moss_request_id). A vllm-omni item has none."""
    out = {}
    for name in MOSS_HEADERS:
        key = "moss_" + name.removeprefix("x-").removeprefix("moss-").replace("-", "_")
        if result.get(key) is not None:
            out[name] = str(result[key])
    return out


def quantize(samples: np.ndarray) -> np.ndarray:
    """float samples in [-1, 1] -> int16 by the rule moss's own writer uses (io.audio.to_pcm16)."""
    return np.clip(np.rint(samples * 32767.0), -32768, 32767).astype("<i2")


def sse_audio(content: bytes) -> tuple[bytes, str]:
    """The audio bytes of a server-sent event stream, in order, and their format. An error event,
    or a stream that ends without `speech.audio.done`, is NotAudio with the server's words."""
    audio, fmt, done = bytearray(), None, False
    for block in content.decode("utf-8", "replace").replace("\r\n", "\n").split("\n\n"):
        data = "".join(line[5:].strip() for line in block.split("\n") if line.startswith("data:"))
        if not data:
            continue
        try:
            event = json.loads(data)
        except (ValueError, RecursionError):
            raise NotAudio(f"an event whose data is not JSON: {data[:120]!r}") from None
        kind = event.get("type") if isinstance(event, dict) else None
        if kind == "speech.audio.delta":
            try:
                audio += base64.b64decode(event.get("audio") or "", validate=True)
            except ValueError:
                raise NotAudio("a speech.audio.delta event whose audio is not base64") from None
            fmt = event.get("response_format") or fmt
        elif kind == "speech.audio.error":
            error = event.get("error") if isinstance(event.get("error"), dict) else {}
            raise NotAudio(f"the stream ended with speech.audio.error: {error.get('message', event)}")
        elif kind == "speech.audio.done":
            done = True
    if not done:
        raise NotAudio(f"an event stream of {len(content)} bytes without speech.audio.done (cut short?)")
    return bytes(audio), fmt or "pcm"


STREAMED_SIZES = (b"\xff\xff\xff\xff", b"\x00\x00\x00\x00")  # what a stream writes before it knows its size


def whole_wav(content: bytes) -> None:
    """A WAV file whose sizes agree with its body, or NotAudio saying how they disagree: libsndfile reads
    a file cut short (or garbage behind a header claiming 2 GB) as the samples it finds, which a
    server's answer must not pass for. A `data` chunk with a stream's size (STREAMED_SIZES) runs to the
    end of the body; RIFF's size may leave out a final pad byte."""
    if len(content) < 12 or content[8:12] != b"WAVE":
        raise NotAudio(f"{len(content)} bytes that begin with RIFF but are not a WAV file")
    declared = struct.unpack("<I", content[4:8])[0] + 8
    if declared not in (len(content), len(content) - 1):
        raise NotAudio(
            f"a WAV whose header gives {declared} bytes in all, in a body of {len(content)} bytes (cut short, or "
            "not the WAV it claims to be)"
        )
    at = 12
    while at + 8 <= len(content):
        chunk, raw = content[at : at + 4], content[at + 4 : at + 8]
        size = struct.unpack("<I", raw)[0]
        if chunk == b"data" and raw in STREAMED_SIZES:
            return
        if at + 8 + size > len(content):
            raise NotAudio(f"a WAV whose {chunk!r} chunk gives {size} bytes, past the end of the body")
        at += 8 + size + (size & 1)


def streamed_wav(content: bytes) -> tuple[np.ndarray, int]:
    """A 16-bit PCM WAV whose header may give unknown (0xFFFFFFFF) sizes, as streams send it: the
    samples are everything after the `data` chunk's header."""
    if len(content) < 12 or content[:4] != b"RIFF" or content[8:12] != b"WAVE":
        raise NotAudio(f"{len(content)} bytes that are not a WAV stream")
    at, fmt = 12, None
    while at + 8 <= len(content):
        chunk, size = content[at : at + 4], struct.unpack("<I", content[at + 4 : at + 8])[0]
        if chunk == b"fmt ":
            fmt = struct.unpack("<HHIIHH", content[at + 8 : at + 24])
        elif chunk == b"data":
            if fmt is None or fmt[0] != 1 or fmt[5] != 16:
                raise NotAudio("a WAV stream that is not 16-bit PCM")
            channels, rate = fmt[1], fmt[2]
            data = content[at + 8 :] if size == 0xFFFFFFFF else content[at + 8 : at + 8 + size]
            data = data[: len(data) - len(data) % (2 * channels)]
            return np.frombuffer(data, dtype="<i2").reshape(-1, channels).copy(), rate
        at += 8 + size + (size & 1)
    raise NotAudio("a WAV stream without a data chunk")


def decode_audio(
    content: bytes,
    response_format: str,
    content_type: str,
    *,
    sample_rate: int,
    channels: int,
    raw_stream: bool = False,
) -> tuple[np.ndarray, int]:
    """(int16 [samples, channels], sample rate) of a body. `sample_rate` and `channels` describe
    raw PCM, which carries neither; WAV and FLAC say their own. `raw_stream`: the body of a
    `stream_format: "audio"` request, whose WAV header comes with its first audio chunk
    (serving_speech.py:1666-1691): a stream with no audio is an empty body, read as no samples."""
    kind = content_type.split(";")[0].strip().lower()
    if raw_stream and not content:
        return np.zeros((0, channels), dtype="<i2"), sample_rate
    if kind == "text/event-stream":
        content, response_format = sse_audio(content)
        kind = f"audio/{response_format}"
    if kind in ("application/json", "text/html", "text/plain") or kind.startswith("text/"):
        snippet = content[:200].decode("utf-8", "replace").strip()
        raise NotAudio(f"{kind} {snippet!r}")
    if response_format == "pcm":
        width = 2 * channels
        if len(content) % width:
            raise NotAudio(f"{len(content)} bytes are not whole 16-bit samples of {channels} channel(s)")
        return np.frombuffer(content, dtype="<i2").reshape(-1, channels).copy(), sample_rate
    if response_format == "wav" and content[4:8] in STREAMED_SIZES:  # a stream's header: sizes unknown
        return streamed_wav(content)
    if content[:4] == b"RIFF":
        whole_wav(content)
    try:
        with sf.SoundFile(io.BytesIO(content)) as audio:
            rate, subtype = audio.samplerate, audio.subtype
            if subtype == "PCM_16":
                return audio.read(dtype="int16", always_2d=True).astype("<i2"), rate
            return quantize(audio.read(dtype="float64", always_2d=True)), rate
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise NotAudio(f"{len(content)} bytes of {kind or 'unnamed content'} that do not decode ({e})") from None
