"""The output directory of a synth job, local (`moss synth`) or through a server (`moss synth
--server`): one audio file per request named from its id, the resume journal, the manifest.

The guarantees live here once: ids cannot write outside the directory; a re-run skips what the
journal says is done and the file proves; each finished request is journaled before its audio file
is renamed into place (a kill leaves no file without a record); temporary files a killed run left
are removed; the manifest is written atomically, in input order. One folder has one manifest: the
rows of another request file written there before (their audio files still in place) stay in it,
first, so a second request file into the same --out adds its rows and drops none."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..errors import MossError
from .atomic import check_creatable, write_text_atomic, writing
from .audio import FORMATS, write_audio
from .manifest import write_manifest
from .resume import Journal, orphan_files, plan_resume, remove_stale_temporaries

ENVIRONMENT = ".moss/environment.json"  # what computed the audio (device, dtype, threads, torch, checkpoints)


def read_environment(out: Path) -> dict | None:
    """The environment an output directory records, or None (an older or a server run)."""
    try:
        found = json.loads((out / ENVIRONMENT).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) else None


class OutputDir:
    def __init__(self, out: Path, audio_format: str, ids: list[str], requests_file: Path | None = None) -> None:
        self.check(out, audio_format)
        self.out, self.format, self.ids = out, audio_format, ids
        self.names = {rid: f"{rid}.{audio_format}" for rid in ids}
        for rid, name in self.names.items():  # ids are validated as plain names; this keeps it that way
            if (out / name).resolve().parent != out.resolve():
                raise MossError(f"id {rid!r} would write outside the output directory", file=requests_file, field="id")
        self.journal = Journal(out)
        self.rows: dict[str, dict] = {}
        self.kept: dict[str, dict] = {}  # rows of other request files' requests, their files in place
        self.fingerprints: dict[str, str] = {}
        self.force = False
        self.opened = False
        # Audio files this run does not write: another request file's, or these ids' in another format.
        found = orphan_files(out, set(self.names.values()))
        self.orphans = [name for name in found if Path(name).stem not in self.names]
        self.other_formats = [name for name in found if Path(name).stem in self.names]

    @staticmethod
    def check(out: Path, audio_format: str) -> None:
        """What can be checked before the requests are read and any model loads."""
        if audio_format not in FORMATS:
            raise MossError(f"unknown audio format {audio_format!r}; expected wav or flac", field="--format")
        if out.exists() and not out.is_dir():
            raise MossError("output path exists and is not a directory", file=out, field="--out")
        if not out.is_dir():
            check_creatable(out, "--out")
        elif not os.access(out, os.W_OK | os.X_OK):  # false on a read-only file system, even for root
            raise MossError("directory is not writable", file=out, field="--out")

    def path(self, rid: str) -> Path:
        return self.out / self.names[rid]

    def plan(self, fingerprints: dict[str, str], force: bool) -> dict[str, dict]:
        """The manifest rows of requests an earlier run of the same command finished (none with
        `force`); raises MossError for files that belong to other content."""
        self.fingerprints, self.force = fingerprints, force
        done: dict[str, dict] = {}
        self.journal.load()
        self.kept = {
            rid: entry.row
            for rid, entry in self.journal.entries.items()
            if rid not in self.names and (self.out / str(entry.row.get("file", ""))).is_file()
        }
        kept_files = {str(row["file"]) for row in self.kept.values()}
        self.orphans = [name for name in self.orphans if name not in kept_files]
        if not force:
            if self.out.exists():
                expected = {rid: (fingerprints[rid], self.names[rid]) for rid in self.ids}
                done = plan_resume(self.out, self.journal, expected, force)
        self.rows = dict(done)
        return done

    def open(self, force: bool) -> None:
        """Before the first result (`record` does it if no one did): a fresh journal with `force`;
        the folder; no stale temporaries."""
        self.opened = True
        with writing(self.out, "--out"):
            if force:  # this run's requests start over; other request files' keep their records
                self.journal.reset(keep=set(self.kept))
            self.out.mkdir(parents=True, exist_ok=True)
            remove_stale_temporaries(self.out)

    def record(self, rid: str, row: dict, pcm: np.ndarray | None = None, sample_rate: int | None = None) -> None:
        """A finished request: first the journal, then its audio file (unless the caller commits a
        file it streamed)."""
        if not self.opened:
            self.open(self.force)
        with writing(self.journal.path, "--out"):
            self.journal.append(self.fingerprints[rid], row)
        if pcm is not None:
            with writing(self.path(rid), "--out"):
                write_audio(self.path(rid), pcm, sample_rate, self.format)
        self.rows[rid] = row

    def write_environment(self, environment: dict) -> None:
        """Recorded for `moss diff`: it names the fields that differ between two machines' runs (the
        run that wrote the directory last; requests resumed from an earlier run kept their files)."""
        with writing(self.out / ENVIRONMENT, "--out"):
            write_text_atomic(self.out / ENVIRONMENT, json.dumps(environment, indent=2, sort_keys=True) + "\n")

    def write_manifest(self) -> tuple[Path, list[dict]]:
        """The folder's manifest: the rows other request files left (`kept`), then every finished request of
        this run in input order (a partial one after an interrupt). Returns it and this run's rows."""
        ordered = [self.rows[rid] for rid in self.ids if rid in self.rows]
        manifest = self.out / "manifest.csv"
        with writing(manifest, "--out"):
            write_manifest(manifest, [*self.kept.values(), *ordered])
        return manifest, ordered
