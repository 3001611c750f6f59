"""The manifest: one row per request, written as CSV with pandas."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .atomic import atomic_path
from .audio import codes_sha256, pcm_sha256

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


def manifest_row(result, sample_rate: int, channels: int, file: str) -> dict:
    """One request's row from a pipeline `SynthResult` (what was asked, what came out, how)."""
    eff = result.effective
    return {
        "id": result.request.id,
        "text": result.request.text,
        "seed": eff.seed,
        "seed_source": eff.seed_source,
        "frames": result.frames,
        "duration_s": round(result.pcm.shape[0] / sample_rate, 6),
        "sample_rate": sample_rate,
        "channels": channels,
        "codes_sha256": codes_sha256(result.codes),
        "pcm_sha256": pcm_sha256(result.pcm),
        "batch_size_seen": result.batch_size_seen,
        "wall_s": round(result.wall_s, 4),
        "file": file,
        "stopped": result.stopped,
        "stop_reason": result.stop_reason,
        "audio_temperature": eff.audio.temperature if eff.do_sample else 0.0,
        "audio_top_p": eff.audio.top_p,
        "audio_top_k": eff.audio.top_k,
        "audio_repetition_penalty": eff.audio.repetition_penalty,
        "prompt_tokens": result.prompt_tokens,
        "ttfa_s": None if result.time_to_first_audio is None else round(result.time_to_first_audio, 4),
        "chunks": None if result.stream is None else " ".join(str(c.frames) for c in result.stream.chunks),
        "chunk_ms": None if result.stream is None else " ".join(f"{c.decode_ms:.1f}" for c in result.stream.chunks),
    }
