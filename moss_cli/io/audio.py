"""Audio files and the hashes that identify their content.

The PCM written is 16-bit, converted here (not by libsndfile) so that `pcm_sha256` is the hash of
exactly the samples stored in the file: interleaved int16, little-endian.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

from .atomic import atomic_path, temporary_name, writing

FORMATS = {"wav": "WAV", "flac": "FLAC"}


def to_pcm16(audio: torch.Tensor) -> np.ndarray:
    """float audio [channels, samples] in [-1, 1] -> int16 [samples, channels] (clipped, rounded)."""
    samples = audio.detach().to(torch.float64).cpu().numpy().T
    return np.clip(np.rint(samples * 32767.0), -32768, 32767).astype("<i2")


def pcm_sha256(pcm: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pcm, dtype="<i2").tobytes()).hexdigest()


def codes_sha256(codes: torch.Tensor) -> str:
    """Hash of a [frames, n_vq] code tensor as little-endian int32, shape included."""
    array = np.ascontiguousarray(codes.detach().cpu().numpy().astype("<i4"))
    return hashlib.sha256(f"{array.shape}".encode() + array.tobytes()).hexdigest()


def write_audio(path: Path, pcm: np.ndarray, sample_rate: int, audio_format: str) -> None:
    """Write atomically: a temporary file in the same directory, renamed into place when complete.
    Encoded in memory first, so that a failed write says why (libsndfile would say "System error.")."""
    encoded = io.BytesIO()
    sf.write(encoded, pcm, sample_rate, subtype="PCM_16", format=FORMATS[audio_format])
    with atomic_path(path) as tmp:
        tmp.write_bytes(encoded.getvalue())


class ProgressiveAudio:
    """An audio file of `--out` written chunk by chunk (streaming) under a temporary name, renamed
    into place by `commit` once complete; `discard` removes it."""

    def __init__(self, path: Path, sample_rate: int, channels: int, audio_format: str) -> None:
        self.path = path
        self.tmp = temporary_name(path)
        self.sample_rate, self.channels, self.format = sample_rate, channels, FORMATS[audio_format]
        self.file: sf.SoundFile | None = None

    def write(self, audio: torch.Tensor) -> None:
        with writing(self.path, "--out"):
            if self.file is None:
                self.file = sf.SoundFile(
                    str(self.tmp), "w", self.sample_rate, self.channels, "PCM_16", format=self.format
                )
            self.file.write(to_pcm16(audio))
            self.file.flush()

    def commit(self) -> None:
        if self.file is None:  # no audio at all: still an (empty) file
            self.write(torch.zeros(self.channels, 0))
        with writing(self.path, "--out"):
            self.file.close()
            os.replace(self.tmp, self.path)

    def discard(self) -> None:
        if self.file is not None:
            self.file.close()
        self.tmp.unlink(missing_ok=True)
