"""Resumable output directories.

Every finished request is recorded in `OUT/.moss/journal.jsonl` (one JSON line, flushed and
fsynced) *before* its audio file is renamed into place, together with a fingerprint of what
produced it: the request's content, its effective seed and sampling parameters, its frame budget,
the audio format, the execution mode and the checkpoints' configs. A re-run skips a request whose
journal entry has the same fingerprint and whose file holds exactly the journaled samples, and
regenerates the rest. A file that exists without a matching entry belongs to something else: that
is an error unless `--force`.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import soundfile as sf

from ..errors import MossError
from .atomic import TEMPORARY_GLOB, write_text_atomic
from .audio import FORMATS, pcm_sha256
from .fingerprint import fingerprint

JOURNAL = Path(".moss") / "journal.jsonl"


@dataclass
class Entry:
    fingerprint: str
    row: dict


class Journal:
    def __init__(self, out: Path) -> None:
        self.path = out / JOURNAL
        self.entries: dict[str, Entry] = {}

    def load(self) -> None:
        """Read earlier entries; a torn last line (a killed writer) is ignored."""
        if not self.path.is_file():
            return
        with self.path.open(encoding="utf-8") as handle:
            for line in handle:
                try:
                    item = json.loads(line)
                    self.entries[item["row"]["id"]] = Entry(item["fingerprint"], item["row"])
                except (json.JSONDecodeError, KeyError, TypeError):
                    continue

    def reset(self, keep: set[str] = frozenset()) -> None:
        """Forget every entry but those of `keep` (other request files' outputs in the same folder)."""
        kept = [entry for rid, entry in self.entries.items() if rid in keep]
        self.entries = {entry.row["id"]: entry for entry in kept}
        self.path.unlink(missing_ok=True)
        if kept:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            lines = "".join(json.dumps({"fingerprint": e.fingerprint, "row": e.row}, default=str) + "\n" for e in kept)
            write_text_atomic(self.path, lines)

    def append(self, fp: str, row: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({"fingerprint": fp, "row": row}, default=str) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        self.entries[row["id"]] = Entry(fp, row)


def file_matches(path: Path, pcm_hash: str) -> bool:
    """True when the audio file exists, decodes, and holds exactly the journaled samples."""
    if not path.is_file():
        return False
    try:
        data, _ = sf.read(str(path), dtype="int16", always_2d=True)
    except (sf.LibsndfileError, RuntimeError, OSError):
        return False
    return pcm_sha256(data) == pcm_hash


def remove_stale_temporaries(out: Path) -> None:
    """Temporary files left by a killed run (`.<name>.tmp-<pid>`)."""
    for path in out.glob(TEMPORARY_GLOB):
        if path.is_file():
            path.unlink(missing_ok=True)


def request_fingerprint(p, settings: dict, audio_format: str, checkpoints: dict) -> str:
    """What made a request's output: its content, effective seed and sampling, frame budget, the
    format, the run's numeric settings and the checkpoints (`p`: a pipeline `Prepared`)."""
    eff = p.effective
    return fingerprint(
        {
            "text": p.request.text,
            "fields": p.request.prompt_fields,
            "seed": eff.seed,
            "seed_source": eff.seed_source,
            "audio": eff.audio.__dict__,
            "stop": eff.stop.__dict__,
            "do_sample": eff.do_sample,
            "max_new_frames": p.max_new_frames,
            "format": audio_format,
            "checkpoints": checkpoints,
            "ref_audio": p.reference.sha256 if p.reference else None,
            "ref_text": p.request.ref_text,
            **settings,
        }
    )


def run_settings(options, dtype) -> dict:
    """The run-wide part of a request fingerprint (keys kept stable so older journals still match)."""
    numerics = options.numerics
    return {
        "batch_invariant": numerics.batch_invariant,
        "row_block": numerics.engine_block,
        "legacy_global_rng": options.legacy_global_rng,
        "dtype": str(dtype),
        "codec_row_tile": numerics.codec_rows,
    }


def orphan_files(out: Path, names: set[str]) -> list[str]:
    """Audio files in `out` that no request of this run writes (left by a run of another request
    file). They are listed for the user, never deleted: they may be someone's work."""
    if not out.is_dir():
        return []
    audio = {f".{suffix}" for suffix in FORMATS}
    return sorted(
        p.name
        for p in out.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in audio and p.name not in names
    )


def plan_resume(out: Path, journal: Journal, expected: dict[str, tuple[str, str]], force: bool) -> dict[str, dict]:
    """Which requests are already done. `expected` maps id -> (fingerprint, file name).

    Returns the journaled manifest rows to reuse; raises MossError for outputs that belong to a
    different request (unless `force`)."""
    done: dict[str, dict] = {}
    conflicts = []
    for rid, (fp, name) in expected.items():
        entry = journal.entries.get(rid)
        path = out / name
        if (
            entry is not None
            and entry.fingerprint == fp
            and entry.row.get("file") == name
            and file_matches(path, entry.row["pcm_sha256"])
        ):
            done[rid] = entry.row
        elif entry is not None and entry.fingerprint != fp and path.exists():
            conflicts.append(f"{name}: made from different request content or settings")
        elif entry is None and path.exists():
            conflicts.append(f"{name}: exists but was not written by moss for this request")
    if conflicts and not force:
        shown = "; ".join(conflicts[:5]) + (f"; and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        raise MossError(
            f"output already exists for other content: {shown}. Use --force to regenerate, or choose another --out",
            file=out,
            field="--out",
        )
    return done
