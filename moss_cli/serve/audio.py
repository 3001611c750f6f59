"""Response bodies: a whole file (wav, flac) or raw PCM, and the WAV header a stream starts with."""

from __future__ import annotations

import io
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
