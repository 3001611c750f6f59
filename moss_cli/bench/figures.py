"""The figures of a set of responses, under the names `vllm bench serve --omni` gives them in its JSON
(paths: the vllm_omni package of its 0.30.0 wheel): `completed`, `failed`, `duration`,
`request_throughput` (completed / duration), `total_audio_duration_s`, `total_audio_frames` (PCM
sample frames), `audio_throughput` (audio seconds per second of the run), and for each of `e2el`,
`audio_ttfp` (ms), `audio_rtf`, `audio_duration` and `audio_underrun` (s) its `mean_`, `median_`,
`std_` and `pNN_` values (numpy's linear percentiles, as vllm-omni's; benchmarks/patch/patch.py:3596-3640
and 3770-3798, benchmarks/metrics/metrics.py:1150-1242), plus `audio_continuity_ok_rate`."""

from __future__ import annotations

import statistics

import numpy as np

PERCENTILES = (50, 90, 99)
# (vllm-omni's metric name, the unit suffix of its JSON keys, scale from seconds), in its order
METRICS = (
    ("e2el", "_ms", 1000.0),
    ("audio_ttfp", "_ms", 1000.0),
    ("audio_rtf", "", 1.0),
    ("audio_duration", "_s", 1.0),
    ("audio_underrun", "_s", 1.0),
)
# What the cost table sets side by side: each arm's figure over the unseeded arm's, per concurrency.
# The first five do not depend on how long each response is; the last three do, and an arm's seeds
# change where the stop head ends a request (the arms' audio durations differ), so they are read with care.
COST = (
    "median_audio_ttfp_ms",
    "p99_audio_ttfp_ms",
    "median_audio_rtf",
    "p99_audio_rtf",
    "audio_throughput",
    "median_e2el_ms",
    "p99_e2el_ms",
    "request_throughput",
)


def figures(samples: dict[str, list[float]], completed: int, failed: int, duration_s: float, most: int) -> dict:
    """vllm-omni's figures of one arm at one concurrency. `samples`: per metric name, the seconds
    (or ratio) of each completed response where it was measured; `most`: the most requests that were in
    flight at once."""
    audio = samples.get("audio_duration", [])
    out = {
        "completed": completed,
        "failed": failed,
        "duration": round(duration_s, 4),
        "request_throughput": round(completed / duration_s, 4) if duration_s > 0 else 0.0,
        "total_audio_duration_s": round(sum(audio), 4),
        "total_audio_frames": int(sum(samples.get("audio_frames", []))),
        "audio_throughput": round(sum(audio) / duration_s, 4) if duration_s > 0 else 0.0,
        "max_concurrent_requests": most,
    }
    for name, suffix, scale in METRICS:
        values = np.asarray(samples.get(name, []), dtype=float) * scale
        if not values.size:
            continue
        out[f"mean_{name}{suffix}"] = round(float(values.mean()), 4)
        out[f"median_{name}{suffix}"] = round(float(np.median(values)), 4)
        out[f"std_{name}{suffix}"] = round(float(values.std()), 4)
        for p in PERCENTILES:
            out[f"p{p}_{name}{suffix}"] = round(float(np.percentile(values, p)), 4)
    continuity = samples.get("audio_continuity_ok", [])
    if continuity:
        out["audio_continuity_ok_rate"] = round(sum(continuity) / len(continuity), 4)
    return out


def ratios(rounds: list[dict], baseline: list[dict]) -> dict[str, list[float]]:
    """Per COST figure, the median and [min, max] over the rounds of this arm's figure over the
    baseline's of the same round (the arms alternate within a round, so drift hits both alike)."""
    out = {}
    for key in COST:
        pairs = [r[key] / b[key] for r, b in zip(rounds, baseline) if key in r and b.get(key)]
        if pairs:
            out[key] = [round(statistics.median(pairs), 4), round(min(pairs), 4), round(max(pairs), 4)]
    return out
