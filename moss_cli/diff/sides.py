"""One side of `moss diff`: the output directory of `moss synth` (manifest.csv, the audio files and
the resume journal) or a golden file of `moss audit-determinism --save-golden` (hashes only).

A manifest is read row by row and checked whole: every problem is reported at once (exit 2)."""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path

from ..audit.golden import load_golden
from ..config.request_fields import Problem
from ..config.requests import RequestFileError
from ..errors import MossError
from ..io.output_dir import read_environment
from ..io.resume import Journal

MANIFEST = "manifest.csv"
REQUIRED = ("id", "codes_sha256", "pcm_sha256")
SHA256 = re.compile(r"[0-9a-f]{64}")
# What a manifest row may say about how a request was made; a difference is a likely cause.
SETTINGS = (
    "text",
    "audio_temperature",
    "audio_top_p",
    "audio_top_k",
    "audio_repetition_penalty",
    "sample_rate",
    "channels",
)


@dataclass
class Side:
    label: str  # "A" | "B"
    path: Path  # the directory, or the golden file
    kind: str  # "run" | "golden"
    rows: dict[str, dict]  # id -> the row (strings as read; "seed" an int or None; "frames" an int or None)
    fingerprints: dict[str, str] = field(default_factory=dict)  # id -> the journal's request fingerprint
    environment: dict | None = None  # recorded by a golden file or a run directory

    def audio(self, key: str) -> Path | None:
        """The audio file of `key` on a run side (None for a golden file, which keeps no audio)."""
        if self.kind != "run":
            return None
        return self.path / (self.rows[key].get("file") or f"{key}.wav")

    def describe(self) -> dict:
        return {
            "label": self.label,
            "path": str(self.path),
            "kind": self.kind,
            "ids": len(self.rows),
            "journal": bool(self.fingerprints),
            "environment": self.environment,
        }


def _int(value: str | None, line: int, name: str, problems: list[Problem]) -> int | None:
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)  # not through float: seeds are 64-bit
    except ValueError:
        pass
    try:
        if float(value).is_integer():
            return int(float(value))
    except ValueError:
        pass
    problems.append(Problem(line, name, f"not an integer: {value!r}"))
    return None


def _float(value: str | None) -> float | None:
    try:
        return None if value is None or value.strip() == "" else float(value)
    except ValueError:
        return None


def _check_row(raw: dict, line: int, seen: set[str], problems: list[Problem]) -> dict | None:
    key = (raw.get("id") or "").strip()
    if not key:
        problems.append(Problem(line, "id", "empty id"))
        return None
    if key in seen:
        problems.append(Problem(line, "id", f"duplicate id {key!r}"))
        return None
    seen.add(key)
    for name in ("codes_sha256", "pcm_sha256"):
        if name == "codes_sha256" and not raw.get(name):
            continue  # synthesised through a server that sends no codes hash: not known
        if not SHA256.fullmatch(raw.get(name) or ""):
            problems.append(Problem(line, name, f"not a sha256 hex digest: {raw.get(name)!r}"))
    name = (raw.get("file") or "").strip()
    if name and (Path(name).name != name or name in (".", "..")):
        problems.append(Problem(line, "file", f"not a plain file name in the directory: {name!r}"))
    row = {k: v for k, v in raw.items() if k is not None}
    row.update(
        id=key,
        codes_sha256=raw.get("codes_sha256") or None,
        file=name or None,
        line=line,
        seed=_int(raw.get("seed"), line, "seed", problems),
        frames=_int(raw.get("frames"), line, "frames", problems),
        duration_s=_float(raw.get("duration_s")),
    )
    return row


def read_manifest(path: Path) -> dict[str, dict]:
    problems: list[Problem] = []
    rows: dict[str, dict] = {}
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            reader = csv.DictReader(handle)
            missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
            if missing:
                raise MossError(
                    f"missing column(s) {', '.join(missing)}: not a manifest of moss synth", file=path, line=1
                )
            seen: set[str] = set()
            for raw in reader:
                row = _check_row(raw, reader.line_num, seen, problems)
                if row is not None:
                    rows[row["id"]] = row
    except (UnicodeDecodeError, csv.Error) as e:
        raise MossError(f"unreadable manifest: {e}", file=path) from None
    if problems:
        raise RequestFileError(path, problems)
    return rows


def _golden(path: Path, label: str) -> Side:
    data = load_golden(path, option=label)
    rows = {}
    for key, row in data["requests"].items():
        if not isinstance(row, dict):
            raise MossError(f"request {key!r} is not an object", file=path, field=label)
        rows[key] = {**row, "id": key, "frames": row.get("frames"), "seed": row.get("seed")}
    return Side(label, path, "golden", rows, environment=data.get("environment") or {})


def load_side(path: Path, label: str) -> Side:
    """A directory of `moss synth` (or its manifest.csv), or a golden file; MossError otherwise."""
    if not path.exists():
        raise MossError("does not exist", file=path, field=label)
    if path.is_file() and path.name != MANIFEST:
        return _golden(path, label)
    folder = path if path.is_dir() else path.parent
    manifest = folder / MANIFEST
    if not manifest.is_file():
        raise MossError(f"no {MANIFEST}: not an output directory of moss synth", file=folder, field=label)
    rows = read_manifest(manifest)
    journal = Journal(folder)
    journal.load()
    fingerprints = {  # only entries that made the audio the manifest lists (not an older run's)
        key: entry.fingerprint
        for key, entry in journal.entries.items()
        if key in rows and entry.row.get("pcm_sha256") == rows[key]["pcm_sha256"]
    }
    return Side(label, folder, "run", rows, fingerprints, environment=read_environment(folder))
