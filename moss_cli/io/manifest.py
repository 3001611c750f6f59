"""The manifest: one row per request, written as CSV with pandas."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .atomic import atomic_path

COLUMNS = ["id", "text", "seed", "seed_source", "frames", "duration_s", "sample_rate", "channels",
           "codes_sha256", "pcm_sha256", "batch_size_seen", "wall_s", "file", "stopped", "stop_reason", "temperature",
           "top_p", "top_k", "repetition_penalty", "prompt_tokens", "ttfa_s", "chunks", "chunk_ms"]


def manifest_frame(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["seed"] = frame["seed"].astype("Int64")  # integer column that can hold "no seed"
    return frame


def write_manifest(path: Path, rows: list[dict]) -> None:
    with atomic_path(path) as tmp:
        manifest_frame(rows).to_csv(tmp, index=False)

