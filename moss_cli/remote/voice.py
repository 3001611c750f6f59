"""The reference voice moss gives requests of its own where a server requires one (vllm-omni's
MOSS-TTS-Local does: `session.ServerSession.learn_voice`), and the audit's voice-cloning neighbours: a
synthetic voice (`io.reference_audio.synthetic_voice`), nothing downloaded."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ..config.requests import Request


def voice_clip(path: Path, seconds: float, rate: int, pitch: float) -> Path:
    """A synthetic voice written once to `path`, 16-bit WAV."""
    import soundfile as sf

    from ..io.reference_audio import synthetic_voice  # torch: not for --help, which reads the audit's scenarios

    if not path.exists():
        sf.write(str(path), synthetic_voice(seconds, rate, pitch), rate, subtype="PCM_16")
    return path


def default_voice(workdir: Path) -> Path:
    """The clip given to requests of moss's own: 2 s, well inside vllm-omni's 1-30 s."""
    return voice_clip(workdir / "default-voice.wav", 2.0, 24_000, 165.0)


def with_voice(requests: list[Request], voice: Path | None) -> list[Request]:
    """`requests`, each without a reference voice given `voice` (None: unchanged)."""
    if voice is None:
        return requests
    return [r if r.ref_audio is not None else dataclasses.replace(r, ref_audio=voice) for r in requests]
