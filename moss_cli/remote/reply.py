"""A server's answer to one speech request: its audio as the int16 samples a file would store,
and what `moss serve`'s headers say about it (a vllm-omni server sends none of them)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import numpy as np
import soundfile as sf

from .. import speech_api as api
from ..io.audio import pcm_sha256


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
        return self._int(api.HEADER_SEED)

    @property
    def seed_source(self) -> str | None:
        return self.headers.get(api.HEADER_SEED_SOURCE)

    @property
    def frames(self) -> int | None:
        return self._int(api.HEADER_FRAMES)

    @property
    def codes_sha256(self) -> str | None:
        return self.headers.get(api.HEADER_CODES_SHA256)

    @property
    def server_in_flight(self) -> int | None:
        return self._int(api.HEADER_MAX_IN_FLIGHT)

    @property
    def stop_reason(self) -> str | None:
        return self.headers.get(api.HEADER_STOP_REASON)

    @property
    def server_id(self) -> str | None:
        """The id the server gave the request (moss serve's logs use it)."""
        return self.headers.get(api.HEADER_REQUEST_ID)


MOSS_HEADERS = (
    api.HEADER_SEED,
    api.HEADER_SEED_SOURCE,
    api.HEADER_FRAMES,
    api.HEADER_CODES_SHA256,
    api.HEADER_MAX_IN_FLIGHT,
    api.HEADER_STOP_REASON,
    api.HEADER_SAMPLE_RATE,
    api.HEADER_CHANNELS,
    api.HEADER_REQUEST_ID,
)


def moss_headers(headers) -> dict[str, str]:
    return {name: headers[name] for name in MOSS_HEADERS if name in headers}


def quantize(samples: np.ndarray) -> np.ndarray:
    """float samples in [-1, 1] -> int16 by the rule moss's own writer uses (io.audio.to_pcm16)."""
    return np.clip(np.rint(samples * 32767.0), -32768, 32767).astype("<i2")


def decode_audio(
    content: bytes, response_format: str, content_type: str, *, sample_rate: int, channels: int
) -> tuple[np.ndarray, int]:
    """(int16 [samples, channels], sample rate) of a body. `sample_rate` and `channels` describe
    raw PCM, which carries neither; WAV and FLAC say their own."""
    kind = content_type.split(";")[0].strip().lower()
    if kind in ("application/json", "text/html", "text/plain") or kind.startswith("text/"):
        snippet = content[:200].decode("utf-8", "replace").strip()
        raise NotAudio(f"{kind} {snippet!r}")
    if response_format == "pcm":
        width = 2 * channels
        if len(content) % width:
            raise NotAudio(f"{len(content)} bytes are not whole 16-bit samples of {channels} channel(s)")
        return np.frombuffer(content, dtype="<i2").reshape(-1, channels).copy(), sample_rate
    try:
        with sf.SoundFile(io.BytesIO(content)) as audio:
            rate, subtype = audio.samplerate, audio.subtype
            if subtype == "PCM_16":
                return audio.read(dtype="int16", always_2d=True).astype("<i2"), rate
            return quantize(audio.read(dtype="float64", always_2d=True)), rate
    except (sf.LibsndfileError, RuntimeError, TypeError) as e:
        raise NotAudio(f"{len(content)} bytes of {kind or 'unnamed content'} that do not decode ({e})") from None


def audio_tensor(pcm: np.ndarray):
    """float32 [channels, samples] whose `io.audio.to_pcm16` is exactly `pcm` (for comparisons and
    for writing the audio of diverging pairs)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(pcm.T, dtype=np.float32) / 32767.0)
