"""The manifest: one row per request, written as CSV with pandas."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .atomic import atomic_path
from .outcome import Outcome

COLUMNS = [
    "id",
    "text",
    "seed",
    "seed_source",
    "frames",
    "duration_s",
    "sample_rate",
    "channels",
    "codes_sha256",
    "pcm_sha256",
    "batch_size_seen",
    "wall_s",
    "file",
    "stopped",
    "stop_reason",
    "audio_temperature",
    "audio_top_p",
    "audio_top_k",
    "audio_repetition_penalty",
    "prompt_tokens",
    "ttfa_s",
    "chunks",
    "chunk_ms",
]


SAMPLING_COLUMNS = ("audio_temperature", "audio_top_p", "audio_top_k", "audio_repetition_penalty")


def manifest_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    for column in COLUMNS:
        # An integer column with empty cells (a server's run: a request without top_k) stays integer,
        # written `3` as a local run writes it, not `3.0`.
        given = [row.get(column) for row in rows if row.get(column) is not None]
        if given and all(isinstance(v, int) and not isinstance(v, bool) for v in given):
            frame[column] = frame[column].astype("Int64")
    return frame


def write_manifest(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        manifest_frame(rows).to_csv(tmp, index=False)


STOPPED = {"stop": True, "empty": True, "max_frames": False, "cancelled": False}


def manifest_row(outcome: Outcome, file: str) -> dict:
    """One request's row: what was asked, what came out, how."""
    samples = outcome.pcm.shape[0]
    return {
        "id": outcome.id,
        "text": outcome.text,
        "seed": outcome.seed,
        "seed_source": outcome.seed_source,
        "frames": outcome.frames,
        "duration_s": round(samples / outcome.sample_rate, 6),
        "sample_rate": outcome.sample_rate,
        "channels": int(outcome.pcm.shape[1]),
        "codes_sha256": outcome.codes_sha256,
        "pcm_sha256": outcome.pcm_sha256,
        "batch_size_seen": outcome.batch_size_seen,
        "wall_s": round(outcome.wall_s, 4),
        "file": file,
        "stopped": STOPPED.get(outcome.stop_reason),
        "stop_reason": outcome.stop_reason,
        **{name: outcome.sampling.get(name) for name in SAMPLING_COLUMNS},
        "prompt_tokens": outcome.prompt_tokens,
        "ttfa_s": None if outcome.ttfa_s is None else round(outcome.ttfa_s, 4),
        "chunks": None if outcome.chunks is None else " ".join(str(frames) for frames in outcome.chunks),
        "chunk_ms": None if outcome.chunk_ms is None else " ".join(f"{ms:.1f}" for ms in outcome.chunk_ms),
    }
