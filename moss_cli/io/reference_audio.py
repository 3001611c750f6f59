"""Reference voices: read an audio file and bring it to the codec's channels, rate and loudness.

The steps follow the reference processor: mono is duplicated to two channels (more than two:
the first two are kept; a mono codec gets the channel mean), the rate is converted to the codec's
with soxr (a well-kept resampler, not a hand-written filter), and the loudness is normalised
towards -20 dBFS with the gain clamped to +-3 dB.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr
import torch

MIN_RATE, MAX_RATE = 8_000, 384_000
SILENCE = 1e-4  # peak below this (about -80 dBFS) is silence
TARGET_DBFS, MAX_GAIN_DB = -20.0, 3.0


class ReferenceError(ValueError):
    """A reference file that cannot be used; the message says why."""


@dataclass(frozen=True)
class Reference:
    """A checked reference file. Its audio is not kept (a job may name thousands of voices); it is
    read again when the voice is encoded."""

    path: Path
    sha256: str  # of the file's bytes: identical files are encoded once
    samples: int  # length at the codec rate
    channels: int
    rate: int

    def audio(self) -> torch.Tensor:
        """float32 [channels, samples] at the codec rate, loudness-normalised."""
        return _load(self.path, self.channels, self.rate)[1]


def read_reference(path: Path, channels: int, rate: int) -> Reference:
    """Check a reference file (exists, readable, a supported rate, not empty, not silent)."""
    sha, audio = _load(path, channels, rate)
    return Reference(path, sha, audio.shape[-1], channels, rate)


def _load(path: Path, channels: int, rate: int) -> tuple[str, torch.Tensor]:
    try:
        if path.is_dir():
            raise ReferenceError(f"reference audio {path} is a directory, expected an audio file")
        if not path.is_file():
            raise ReferenceError(f"reference audio {path} does not exist")
        data = path.read_bytes()
    except OSError as e:  # a name too long, a file without read permission
        raise ReferenceError(f"reference audio {path} cannot be read ({e.strerror})") from None
    try:
        info = sf.info(str(path))
        samples, source_rate = sf.read(str(path), dtype="float32", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError) as e:
        raise ReferenceError(f"reference audio {path} is not readable audio ({e})") from None
    if not MIN_RATE <= source_rate <= MAX_RATE:
        raise ReferenceError(
            f"reference audio {path} has an unsupported sample rate {source_rate} Hz (expected {MIN_RATE}..{MAX_RATE})"
        )
    if samples.shape[0] == 0:
        raise ReferenceError(f"reference audio {path} is empty ({info.frames} samples)")
    if float(np.abs(samples).max()) < SILENCE:
        raise ReferenceError(f"reference audio {path} is silent")
    return hashlib.sha256(data).hexdigest(), prepare(samples, source_rate, channels, rate)


def prepare(samples: np.ndarray, source_rate: int, channels: int, rate: int) -> torch.Tensor:
    """samples [n, c] -> float32 [channels, n'] at `rate`, loudness-normalised."""
    if channels == 1:
        samples = samples.mean(axis=1, keepdims=True)
    elif samples.shape[1] == 1:
        samples = np.repeat(samples, channels, axis=1)
    else:
        samples = samples[:, :channels]
    if source_rate != rate:
        samples = soxr.resample(np.ascontiguousarray(samples), source_rate, rate, quality="HQ")
    wav = torch.from_numpy(np.ascontiguousarray(samples.T, dtype=np.float32))
    return loudness_normalize(wav)


def loudness_normalize(wav: torch.Tensor) -> torch.Tensor:
    current = 10.0 * math.log10(float(torch.mean(wav.double() ** 2)) + 1e-9)
    gain = max(-MAX_GAIN_DB, min(TARGET_DBFS - current, MAX_GAIN_DB))
    return wav * (10.0 ** (gain / 20.0))


def synthetic_voice(seconds: float = 2.0, rate: int = 24_000, pitch: float = 140.0) -> np.ndarray:
    """A deterministic stand-in for a recorded voice: a gliding harmonic tone with syllable-like
    amplitude bursts, mono float32 in [-0.3, 0.3]. Used for the example clip and the audit's
    `voices` scenario (nothing is downloaded)."""
    t = np.arange(int(rate * seconds)) / rate
    f0 = pitch + 0.2 * pitch * np.sin(2 * np.pi * 0.7 * t)
    phase = 2 * np.pi * np.cumsum(f0) / rate
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))
    syllables = np.clip(np.sin(2 * np.pi * 3.0 * t), 0.0, None) ** 0.5
    return (0.3 * voice * syllables / np.abs(voice).max()).astype(np.float32)
