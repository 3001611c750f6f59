"""Audio files and the hashes that identify their content.

The PCM written is 16-bit, converted here (not by libsndfile) so that `pcm_sha256` is the hash of
exactly the samples stored in the file: interleaved int16, little-endian.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import soundfile as sf
import torch

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
    """Write atomically: a temporary file in the same directory, renamed into place when complete."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        sf.write(str(tmp), pcm, sample_rate, subtype="PCM_16", format=FORMATS[audio_format])
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
