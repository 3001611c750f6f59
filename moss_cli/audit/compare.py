"""Comparing one request's output in a scenario with its reference (alone) output."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..io.outcome import Outcome
from ..measures import passes
from ..measures.waveform import first_differing_sample, format_metrics, measure, spread

STOP = "stop"  # the first difference is in the stop decision (one output is longer)


@dataclass
class Comparison:
    codes_equal: bool | None  # None: unknown (a server that reports no codes hash)
    first_frame: int | None  # first frame whose codes (or stop decision) differ
    first_codebook: int | str | None  # codebook index, or "stop"
    frames_reference: int | None  # None: a server that reports no frame count
    frames_other: int | None
    duration_diff_s: float
    pcm_equal: bool
    measures: dict[str, float | None]  # the waveform measures by JSON key (measures.waveform.MEASURES)
    # Where, in seconds of the reference, the two part: the first diverging frame's start when the
    # codes differ, else the first differing sample; None when the audio is identical.
    first_diverging_s: float | None = None

    @property
    def snr_db(self) -> float | None:
        """The waveform level's measure; None: identical (an infinite SNR)."""
        return self.measures["snr_db"]

    def as_dict(self) -> dict:
        return spread(self.__dict__)

    def passes(self, level: str, min_snr_db: float) -> bool:
        """Whether it passes at `level` (measures.passes)."""
        return passes(level, min_snr_db, codes_equal=self.codes_equal, pcm_equal=self.pcm_equal, snr_db=self.snr_db)


def first_divergence(a: torch.Tensor, b: torch.Tensor) -> tuple[int, int | str] | None:
    """(frame, codebook) of the first differing code, (frame, "stop") if one is a prefix of the other."""
    n = min(a.shape[0], b.shape[0])
    diff = (a[:n] != b[:n]).nonzero()
    if diff.numel():
        frame, codebook = diff[0].tolist()
        return frame, codebook
    if a.shape[0] != b.shape[0]:
        return n, STOP
    return None


def _first_diverging_s(reference: Outcome, other: Outcome, div, sample_rate: int) -> float | None:
    if div is not None and reference.codes.shape[0]:
        hop = reference.pcm.shape[0] / reference.codes.shape[0]  # samples per frame
        return div[0] * hop / sample_rate
    sample = first_differing_sample(reference.waveform, other.waveform)
    return None if sample is None else sample / sample_rate


def compare(reference: Outcome, other: Outcome, sample_rate: int) -> Comparison:
    """One request's outcome in a run against its reference (alone)."""
    if reference.codes is not None and other.codes is not None:
        div = first_divergence(reference.codes, other.codes)
        codes_equal = div is None
    else:  # a server: the codes hashes it reported, else unknown
        div = None
        known = reference.codes_hash is not None and other.codes_hash is not None
        codes_equal = reference.codes_hash == other.codes_hash if known else None
    return Comparison(
        codes_equal=codes_equal,
        first_frame=None if div is None else div[0],
        first_codebook=None if div is None else div[1],
        frames_reference=reference.frames,
        frames_other=other.frames,
        duration_diff_s=(other.pcm.shape[0] - reference.pcm.shape[0]) / sample_rate,
        pcm_equal=reference.pcm_sha256 == other.pcm_sha256,
        measures=measure(reference.waveform, other.waveform),
        first_diverging_s=_first_diverging_s(reference, other, div, sample_rate),
    )


def format_divergence(cmp: Comparison) -> str:
    """Where two outputs first differ: a frame and codebook when the codes are known, else the
    time of the first differing sample."""
    if cmp.first_frame is not None:
        return f"frame {cmp.first_frame}, codebook {cmp.first_codebook}"
    if cmp.first_diverging_s is not None:
        return f"sample at {cmp.first_diverging_s:.3f} s"
    return "-"


def format_audio(cmp: Comparison) -> str:
    """The waveform metrics of one comparison in one line."""
    if cmp.pcm_equal:
        return "PCM identical"
    return format_metrics(cmp.measures)
