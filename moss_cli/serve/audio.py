"""Response bodies: a whole file (wav, flac) or raw PCM, the WAV header a stream starts with, and
the server-sent events of an SSE stream."""

from __future__ import annotations

import base64
import io
import json
import struct

import numpy as np
import soundfile as sf

from ..io.audio import FORMATS

STREAM_FORMATS = ("wav", "pcm")  # a FLAC stream would need an encoder kept open across chunks
UNKNOWN_SIZE = 0xFFFFFFFF  # what streaming WAV writers put in the size fields: "until the stream ends"


def encode(pcm: np.ndarray, sample_rate: int, response_format: str) -> bytes:
    """int16 [samples, channels] -> the body of a non-streaming response. `pcm` is the samples
    themselves (interleaved, little-endian), as OpenAI's `pcm` format; wav and flac are 16-bit."""
    if response_format == "pcm":
        return np.ascontiguousarray(pcm, dtype="<i2").tobytes()
    buffer = io.BytesIO()
    sf.write(buffer, pcm, sample_rate, subtype="PCM_16", format=FORMATS[response_format])
    return buffer.getvalue()


def wav_stream_header(sample_rate: int, channels: int) -> bytes:
    """A 16-bit PCM WAV header whose sizes say "unknown": the samples follow as they are decoded."""
    block = 2 * channels
    return (
        b"RIFF"
        + struct.pack("<I", UNKNOWN_SIZE)
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, channels, sample_rate, sample_rate * block, block, 16)
        + b"data"
        + struct.pack("<I", UNKNOWN_SIZE)
    )


def sse_event(kind: str, **fields) -> str:
    """One server-sent event as vllm-omni writes it (serving_speech.py:1817-1890): the event name,
    then its JSON with `type` first, without spaces."""
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **fields}, separators=(',', ':'))}\n\n"


def audio_delta(piece: bytes, response_format: str) -> str:
    """`speech.audio.delta`: one piece of the stream's bytes, base64."""
    return sse_event(
        "speech.audio.delta", audio=base64.b64encode(piece).decode("ascii"), response_format=response_format
    )
