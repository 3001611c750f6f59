"""The figures of a diverging pair (matplotlib, Agg, PNG), drawn from the two audio files in the
report folder: a waveform overlay with the difference on its own axis, and both spectrograms with
their difference; the first divergence is marked on each. And `moss bench --server`'s figures against
concurrency, one line per arm."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import soundfile as sf

DPI = 80
COLOURS = ("#1f5fa8", "#d0621b")


def _mono(path: Path) -> tuple[np.ndarray, int]:
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    return data.mean(axis=1), rate


def _figure(height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(9.6, height), dpi=DPI)
    figure.subplots_adjust(left=0.1, right=0.9, top=0.93, bottom=0.1, hspace=0.12)
    FigureCanvasAgg(figure)  # no pyplot, no global state: safe in any thread, no display needed
    return figure


def _mark(axes, mark_s: float | None, label: str) -> None:
    if mark_s is None:
        return
    for n, ax in enumerate(axes):
        ax.axvline(mark_s, color="#c00000", linestyle="--", linewidth=1.2, label=label if n == 0 else None)


def _save(figure, folder: Path, relative: str) -> str:
    path = folder / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", pil_kwargs={"compress_level": 2})  # fast; the files stay small
    return relative


def _envelope(signal: np.ndarray, rate: int, points: int = 1200) -> tuple[np.ndarray, np.ndarray]:
    """Times and values of a min/max envelope: what the eye sees at this width, for a fraction of
    the drawing time of every sample (a long clip has millions)."""
    if len(signal) <= 2 * points:
        return np.arange(len(signal)) / rate, signal
    step = len(signal) // points
    blocks = signal[: step * points].reshape(points, step)
    values = np.stack([blocks.min(axis=1), blocks.max(axis=1)], axis=1).reshape(-1)
    times = np.repeat(np.arange(points) * step, 2) / rate
    return times, values


def waveform(folder: Path, signals, labels, rate: int, mark_s, mark_label: str, relative: str) -> str:
    figure = _figure(4.2)
    top, bottom = figure.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    for signal, label, colour in zip(signals, labels, COLOURS):
        top.plot(*_envelope(signal, rate), linewidth=0.6, color=colour, alpha=0.75, label=label)
    n = min(len(s) for s in signals)
    bottom.plot(*_envelope(signals[1][:n] - signals[0][:n], rate), linewidth=0.6, color="#444444")
    top.set_ylabel("amplitude")
    bottom.set_ylabel(f"{labels[1]} - {labels[0]}"[:40])
    bottom.set_xlabel("seconds")
    _mark((top, bottom), mark_s, mark_label)
    top.legend(loc="upper right", fontsize=8)
    top.set_title("waveforms (mono mix) and their difference", fontsize=10)
    return _save(figure, folder, relative)


def _log_power(signal: np.ndarray, n_fft: int, hop: int) -> np.ndarray:
    if len(signal) < n_fft:
        signal = np.pad(signal, (0, n_fft - len(signal)))
    frames = np.lib.stride_tricks.sliding_window_view(signal, n_fft)[::hop] * np.hanning(n_fft)
    return 10.0 * np.log10(np.abs(np.fft.rfft(frames, axis=1)) ** 2 + 1e-10).T  # [bins, frames]


def spectrograms(folder: Path, signals, labels, rate: int, mark_s, mark_label: str, relative: str) -> str:
    n_fft = 2 ** max(6, round(math.log2(rate * 0.02)))  # about 20 ms windows at any rate
    hop = n_fft // 4
    n = min(len(s) for s in signals)
    powers = [_log_power(s, n_fft, hop) for s in signals]
    common = min(p.shape[1] for p in powers)
    difference = powers[1][:, :common] - powers[0][:, :common]
    figure = _figure(6.6)
    axes = figure.subplots(3, 1, sharex=True)
    floor = max(p.max() for p in powers) - 90.0
    top_hz = rate / 2
    for ax, power, label, samples in zip(axes, powers, labels, signals):
        extent = (0, max(len(samples), n_fft) / rate, 0, top_hz)
        image = ax.imshow(power, origin="lower", aspect="auto", extent=extent, vmin=floor, cmap="magma")
        ax.set_ylabel(f"{label[:24]} (Hz)", fontsize=8)
    figure.colorbar(image, ax=axes[:2], label="dB")
    limit = max(float(np.abs(difference).max()), 1e-6)
    extent = (0, max(n, n_fft) / rate, 0, top_hz)
    shown = axes[2].imshow(
        difference, origin="lower", aspect="auto", extent=extent, cmap="RdBu_r", vmin=-limit, vmax=limit
    )
    figure.colorbar(shown, ax=axes[2], label="dB difference")
    axes[2].set_ylabel("difference (Hz)", fontsize=8)
    axes[2].set_xlabel("seconds")
    axes[0].set_title("spectrograms and their difference (second - first)", fontsize=10)
    axes[0].set_xlim(0, max(max(len(s) for s in signals), n_fft) / rate)  # sharex: every panel on one time axis
    _mark(axes, mark_s, mark_label)
    return _save(figure, folder, relative)


def against_concurrency(folder: Path, panels: list[tuple[str, dict]], title: str, relative: str) -> str:
    """Line plots against concurrency (a log-2 axis), one panel per figure: `panels` is a list of
    (y-axis label, {series label: (concurrency levels, values)}), series drawn in the same colour and
    marker in every panel."""
    figure = _figure(2.6 * len(panels) + 0.6)
    axes = figure.subplots(len(panels), 1, sharex=True, squeeze=False)[:, 0]
    labels = sorted({label for _, series in panels for label in series})
    styles = {label: (f"C{n % 10}", "os^vD"[n % 5]) for n, label in enumerate(labels)}
    for ax, (ylabel, series) in zip(axes, panels):
        for label, (xs, ys) in series.items():
            colour, marker = styles[label]
            ax.plot(xs, ys, color=colour, marker=marker, linewidth=1.2, label=label)
        ax.set_ylabel(ylabel, fontsize=8)
        ax.set_xscale("log", base=2)
        ax.grid(True, alpha=0.3)
    levels = sorted({x for _, series in panels for xs, _ in series.values() for x in xs})
    axes[-1].set_xticks(levels, [str(x) for x in levels])
    axes[-1].set_xlabel("concurrency (requests in flight)")
    axes[0].legend(loc="best", fontsize=8)
    axes[0].set_title(title, fontsize=10)
    return _save(figure, folder, relative)


def draw_pair(folder: Path, pair, stem: str) -> list[tuple[str, str]]:
    """Both figures of a `PairView` whose two audio files are in `folder`; returns (caption, path)."""
    (label_a, path_a), (label_b, path_b) = pair.audio
    (a, rate), (b, _) = _mono(folder / path_a), _mono(folder / path_b)
    labels, signals = (label_a, label_b), (a, b)
    return [
        (
            "waveforms and difference",
            waveform(folder, signals, labels, rate, pair.mark_s, pair.mark_label, f"{stem}-waveform.png"),
        ),
        (
            "spectrograms and difference",
            spectrograms(folder, signals, labels, rate, pair.mark_s, pair.mark_label, f"{stem}-spectrogram.png"),
        ),
    ]
