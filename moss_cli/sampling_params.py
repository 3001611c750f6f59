"""Sampling parameters of a talker head: what a deploy config or a request sets and the engine
obeys. Plain values, so configuration and engine can share them without importing each other."""

from __future__ import annotations

from dataclasses import dataclass

from .vllm_omni import AUDIO_SAMPLER, STOP_GATE


@dataclass(frozen=True)
class HeadSampling:
    """Sampling parameters of one head (the audio heads or the stop head)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    repetition_penalty: float = 1.0


# What a MOSS-TTS-Local deployment samples, whatever its deploy file's stage-0 sampling params say
# (vllm_omni.py): the audio sampler vllm-omni fixes and its continue/stop gate. These are also the
# OpenMOSS reference generate() defaults, which the Python API mirrors.
STOP_HEAD_DEFAULTS = HeadSampling(**STOP_GATE)
AUDIO_DEFAULTS = HeadSampling(**AUDIO_SAMPLER)
