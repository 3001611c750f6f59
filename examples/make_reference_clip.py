"""Write examples/reference-voice.wav: a 2-second synthetic "voice" (a gliding harmonic tone with
syllable-like amplitude bursts), 24 kHz mono, so the example exercises resampling to the codec's
rate and channel duplication. Deterministic: the same bytes on every run.

    python examples/make_reference_clip.py
"""

from pathlib import Path

import numpy as np
import soundfile as sf

RATE, SECONDS = 24_000, 2.0


def clip() -> np.ndarray:
    t = np.arange(int(RATE * SECONDS)) / RATE
    pitch = 140.0 + 30.0 * np.sin(2 * np.pi * 0.7 * t)  # a slowly gliding fundamental
    phase = 2 * np.pi * np.cumsum(pitch) / RATE
    voice = sum(np.sin(k * phase) / k for k in range(1, 6))  # a few harmonics
    syllables = np.clip(np.sin(2 * np.pi * 3.0 * t), 0.0, None) ** 0.5  # ~6 bursts per second
    return (0.3 * voice * syllables / np.abs(voice).max()).astype(np.float32)


if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "reference-voice.wav"
    sf.write(str(out), clip(), RATE, subtype="PCM_16")
    print(out)
