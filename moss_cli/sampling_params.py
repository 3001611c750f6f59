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


# What a MOSS-TTS-Local deployment samples, whatever its deploy file's stage-0 sampling params say:
# vllm-omni 0.30.0 fixes the audio sampler at the model card's values (temperature 1.7, top_k 25,
# top_p 0.8, repetition penalty 1.0: modeling_moss_tts_talker.py:1634-1654, "the generic stage
# SamplingParams are for the backbone token loop") and leaves the continue/stop gate at
# generate_frame's defaults (1.0 / top_k 50 / top_p 1.0: modeling_moss_tts_local_depth.py:274-276).
# These are also the OpenMOSS reference generate() defaults, which the Python API mirrors.
STOP_HEAD_DEFAULTS = HeadSampling(temperature=1.0, top_p=1.0, top_k=50)
AUDIO_DEFAULTS = HeadSampling(temperature=1.7, top_p=0.8, top_k=25, repetition_penalty=1.0)
