"""How two clips of the same request differ sample by sample: the registry `MEASURES` (SNR,
log-spectral distance, the largest sample difference), one record per measure that holds its JSON
key, labels, unit, function and format; the first differing sample; and the texts, table cells and
page lines reports show people. Signals are float [channels, samples] tensors.

The functions here read `MEASURES` when called, and the reports call them rather than name a
measure, so a measure added to it appears in each comparison's JSON, the pages' tables and pairs,
and the one-line summaries, with no other module touched."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch


def snr_db(reference: torch.Tensor, other: torch.Tensor) -> float | None:
    """Signal-to-noise ratio of `other` against `reference` over their common length."""
    n = min(reference.shape[-1], other.shape[-1])
    ref, oth = reference[..., :n].double(), other[..., :n].double()
    noise = (ref - oth).pow(2).sum().item()
    if noise == 0.0 and reference.shape[-1] == other.shape[-1]:
        return None
    signal = ref.pow(2).sum().item()
    if noise == 0.0:
        noise = 1e-30  # equal over the overlap but different lengths
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def log_spectral_distance(reference: torch.Tensor, other: torch.Tensor, n_fft: int = 1024, hop: int = 256) -> float:
    """Mean over STFT frames of the RMS difference of the log power spectra (dB), on the mono mix."""
    n = min(reference.shape[-1], other.shape[-1])
    if n < n_fft:
        return 0.0 if torch.equal(reference, other) else float("nan")
    window = torch.hann_window(n_fft, dtype=torch.float64)

    def log_power(x: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(x[..., :n].double().mean(0), n_fft, hop, window=window, return_complex=True)
        return 10.0 * torch.log10(spec.abs().pow(2) + 1e-10)

    diff = log_power(reference) - log_power(other)
    return float(diff.pow(2).mean(0).sqrt().mean())


def max_abs_difference(reference: torch.Tensor, other: torch.Tensor) -> float:
    """Largest sample difference over the common length of two [channels, samples] signals."""
    n = min(reference.shape[-1], other.shape[-1])
    return float((reference[..., :n] - other[..., :n]).abs().max()) if n else 0.0


def first_differing_sample(reference: torch.Tensor, other: torch.Tensor) -> int | None:
    """Index of the first sample where two [channels, samples] signals differ (the common length
    when one is a prefix of the other), None when they are equal."""
    n = min(reference.shape[-1], other.shape[-1])
    if n == 0:  # an empty clip (a server answers one when the first frame stops)
        return None if reference.shape[-1] == other.shape[-1] else 0
    differs = (reference[..., :n] != other[..., :n]).reshape(-1, n).any(0).nonzero()
    if differs.numel():
        return int(differs[0])
    return None if reference.shape[-1] == other.shape[-1] else n


# People read these; JSON keeps the full precision.
def format_db(value: float | None) -> str:
    """An SNR or a log-spectral distance in dB, to 2 decimals; None is an infinite SNR."""
    return "inf" if value is None else f"{value:.2f}"


def format_abs(value: float | None) -> str:
    """A sample difference, compact (3 significant digits); None (a report's null) reads 0."""
    return f"{value or 0.0:.3g}"


@dataclass(frozen=True)
class WaveformMeasure:
    """One waveform measure of two clips, and how every report shows it."""

    key: str  # its JSON key, at the top level of each comparison (audit, bench) and case (diff)
    name: str  # its label beside a diverging pair on a page
    short: str  # its label in tables and one-line summaries
    unit: str  # "" when it has none
    compute: Callable[[torch.Tensor, torch.Tensor], float | None]  # (reference, other) -> its value
    format: Callable[[float | None], str]  # its value as people read it

    @property
    def header(self) -> str:
        """Its column header: label and unit."""
        return f"{self.short} {self.unit}".rstrip()

    def show(self, value: float | None) -> str:
        """A value with its unit."""
        return f"{self.format(value)} {self.unit}".rstrip()


# In the order every report lists them. SNR is also the waveform level's rule (measures.passes).
MEASURES: tuple[WaveformMeasure, ...] = (
    WaveformMeasure("snr_db", "SNR", "SNR", "dB", snr_db, format_db),  # None: identical (an infinite SNR)
    WaveformMeasure("log_spectral_distance", "log-spectral distance", "LSD", "dB", log_spectral_distance, format_db),
    WaveformMeasure("max_abs_diff", "max abs difference", "max abs", "", max_abs_difference, format_abs),
)


def measure(reference: torch.Tensor, other: torch.Tensor) -> dict[str, float | None]:
    """Every measure of `other` against `reference` ([channels, samples]), by JSON key."""
    return {m.key: m.compute(reference, other) for m in MEASURES}


def unmeasured() -> dict[str, None]:
    """Every measure's key, none measured (a report lists them all the same)."""
    return {m.key: None for m in MEASURES}


def format_metrics(values: dict) -> str:
    """The measures of one comparison (`values`: by JSON key) in one line: "SNR 61.20 dB, LSD ..."."""
    return ", ".join(f"{m.short} {m.show(values[m.key])}" for m in MEASURES)


# A page's comparisons table has a column per measure, a diverging pair a line per measure;
# `values`: a comparison's or a case's JSON, which holds them by key.
def metric_headers() -> list[str]:
    """The comparisons table's headers of the measures ("SNR dB", ...)."""
    return [m.header for m in MEASURES]


def metric_cells(values: dict, measured: bool = True) -> list[str]:
    """The comparisons table's cells of the measures ("-" where no audio was measured)."""
    return [m.format(values.get(m.key)) if measured else "-" for m in MEASURES]


def audio_metrics(values: dict) -> list[tuple[str, str]]:
    """A diverging pair's measures, as its `PairView.metrics` shows them: (label, value and unit)."""
    return [(m.name, m.show(values.get(m.key))) for m in MEASURES]


def spread(fields: dict) -> dict:
    """A record's fields for JSON, its `measures` dict spread in its place: each measure a top-level key."""
    out = {}
    for key, value in fields.items():
        if key == "measures":
            out.update(value)
        else:
            out[key] = value
    return out
