"""Sampling parameters of a talker head: what a deploy config or a request sets and the engine
obeys. Plain values, so configuration and engine can share them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HeadSampling:
    """Sampling parameters of one head (the audio heads or the stop head)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0


STOP_HEAD_DEFAULTS = HeadSampling(temperature=1.0, top_p=1.0, top_k=50)
# The OpenMOSS reference generate() defaults (the Python API mirrors the reference).
AUDIO_DEFAULTS = HeadSampling(temperature=1.7, top_p=0.8, top_k=25, repetition_penalty=1.0)
