"""Rows of every sampling kind, for tests of the decode step: (audio sampling, do_sample) each.

MIXED: the defaults, a greedy row, a repetition penalty, top-p alone, top-k alone, and no filter."""

from dataclasses import replace

from moss_cli.sampling_params import AUDIO_DEFAULTS

MIXED = [
    (AUDIO_DEFAULTS, True),
    (AUDIO_DEFAULTS, False),
    (replace(AUDIO_DEFAULTS, repetition_penalty=1.3), True),
    (replace(AUDIO_DEFAULTS, top_k=0, top_p=0.7), True),
    (replace(AUDIO_DEFAULTS, top_k=7, top_p=1.0), True),
    (replace(AUDIO_DEFAULTS, top_k=0, top_p=1.0, temperature=0.9), True),
]
