"""Write examples/reference-voice.wav: a 2-second synthetic "voice" (moss_cli's `synthetic_voice`:
a gliding harmonic tone with syllable-like bursts), 24 kHz mono, so the example exercises
resampling to the codec's rate and channel duplication. Deterministic: the same bytes every run.

    python examples/make_reference_clip.py
"""

from pathlib import Path

import soundfile as sf

from moss_cli.io.reference_audio import synthetic_voice

RATE = 24_000

if __name__ == "__main__":
    out = Path(__file__).resolve().parent / "reference-voice.wav"
    sf.write(str(out), synthetic_voice(2.0, RATE, 140.0), RATE, subtype="PCM_16")
    print(out)
