"""How two clips of the same request differ sample by sample: SNR, log-spectral distance, the largest
sample difference (the trio `measure` takes at once, as WaveformMeasures), the first differing sample,
and the short texts reports show people. Signals are float [channels, samples] tensors."""

from __future__ import annotations

import math
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


def format_abs(value: float) -> str:
    """A sample difference, compact (3 significant digits)."""
    return f"{value:.3g}"


def format_metrics(snr: float | None, lsd: float, max_abs: float) -> str:
    """The waveform metrics of one comparison in one line: SNR, log-spectral distance, max abs."""
    return f"SNR {format_db(snr)} dB, LSD {format_db(lsd)} dB, max abs {format_abs(max_abs)}"


@dataclass(frozen=True)
class WaveformMeasures:
    """The waveform trio of two clips; its field names are the JSON keys of every report."""

    snr_db: float | None  # None: identical (an infinite SNR)
    log_spectral_distance: float
    max_abs_diff: float

    def describe(self) -> str:
        return format_metrics(self.snr_db, self.log_spectral_distance, self.max_abs_diff)


def measure(reference: torch.Tensor, other: torch.Tensor) -> WaveformMeasures:
    """SNR, log-spectral distance and max abs of `other` against `reference` ([channels, samples])."""
    return WaveformMeasures(
        snr_db=snr_db(reference, other),
        log_spectral_distance=log_spectral_distance(reference, other),
        max_abs_diff=max_abs_difference(reference, other),
    )
