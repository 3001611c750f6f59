"""`moss synth` as one job, wherever the audio is made: check the output directory, have the source
read and check the request file, plan what an earlier run of the same command already finished
(the resume journal), stop there for a dry run, synthesise the rest, and write each request's
journal record and audio as it finishes and the manifest at the end, stopping cleanly on SIGINT
and SIGTERM. The job owns every output (io/output_dir.py); a `Source` makes the audio."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Protocol

from ..errors import MossError
from ..interrupts import check_interrupted, interrupts_as_exceptions
from ..io.audio import ProgressiveAudio
from ..io.manifest import manifest_row
from ..io.outcome import Outcome
from ..io.output_dir import OutputDir

STOP_REASONS = ("stop", "max_frames", "empty")


@dataclass(frozen=True)
class Facts:
    """What a job takes from its source besides the audio."""

    frame_rate: float = 12.5  # codec frames per second: a dry run's audio estimate
    threads: int = 1
    server: str | None = None  # the server that synthesises (no credentials)
    folder_first: bool = True  # the folder is made before the run (False: with the first answer)
    failure_keeps_manifest: bool = False  # a MossError mid-run writes the manifest of what finished


@dataclass(frozen=True)
class Planned:
    """A request file as its source read and checked it, before anything runs."""

    fingerprints: dict[str, str]  # id -> what makes its file (a re-run with other content redoes it), input order
    seed_sources: dict[str, int]  # where each request's seed will come from, counted
    frame_budget: int


Deliver = Callable[[Outcome, object], None]  # a finished request's outcome and the result `on_result` receives
StreamTo = Callable[[str, int, int], Callable]  # (id, sample rate, channels) -> receiver of its audio chunks


class Source(Protocol):
    """Where a job's audio is made: this machine's engine (local.py), Ray workers (ray.py) or a
    running speech server (server.py). It computes; the job validates nothing itself and writes
    everything."""

    facts: Facts  # known once planned

    def plan(self, requests_path: Path, audio_format: str) -> Planned:
        """Read and check the whole request file before any model loads or anything is sent (every
        problem at once, as a MossError)."""

    def start(self) -> None:
        """Get ready to synthesise (models load; their errors surface here, before any output)."""

    def run(self, ids: list[str], stream_to: StreamTo | None, deliver: Deliver) -> None:
        """Synthesise the planned requests `ids`, handing each to `deliver` as soon as it is done, in
        any order, once each. `stream_to`: decode while generating, each chunk to its receiver."""

    def environment(self) -> dict | None:
        """What computed the audio (as pipeline.environment reports it), once run; None if unknown."""

    def compile_s(self) -> float | None:
        """--compile or --graphs: seconds spent compiling or capturing the decode step; None where
        nothing compiled here."""


@dataclass
class SynthSummary:
    requests: int
    audio_s: float
    wall_s: float
    out: Path
    manifest: Path | None
    rows: list[dict] = field(default_factory=list)
    resumed: int = 0  # requests already done by an earlier run of the same command
    dry_run: bool = False
    frame_budget: int = 0
    seed_sources: dict[str, int] = field(default_factory=dict)
    frame_rate: float = 12.5
    orphans: list[str] = field(default_factory=list)  # audio files in --out that no request and no row owns
    others: list[str] = field(default_factory=list)  # ids of other request files whose rows the manifest keeps
    other_formats: list[str] = field(default_factory=list)  # this run's ids, in another format than --format
    threads: int = 1
    compile_s: float | None = None  # --compile or --graphs: seconds spent compiling or capturing the decode step
    server: str | None = None  # --server: the server that synthesised (no credentials)

    @property
    def empty(self) -> list[str]:
        """Ids whose result has no audio at all (the stop head fired at the first frame)."""
        return [row["id"] for row in self.rows if row.get("stop_reason") == "empty"]

    @property
    def stop_reasons(self) -> dict[str, int]:
        counts = {reason: 0 for reason in STOP_REASONS}
        for row in self.rows:
            if row.get("stop_reason") in counts:
                counts[row["stop_reason"]] += 1
        return counts

    @property
    def real_time_factor(self) -> float:
        """Wall seconds per audio second (below 1 is faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else float("nan")

    def as_dict(self) -> dict:
        return {
            "requests": self.requests,
            "resumed": self.resumed,
            "dry_run": self.dry_run,
            "audio_s": round(self.audio_s, 3),
            "wall_s": round(self.wall_s, 3),
            "real_time_factor": None
            if self.real_time_factor != self.real_time_factor
            else round(self.real_time_factor, 4),
            "frame_budget": self.frame_budget,
            "seed_sources": self.seed_sources,
            "stop_reasons": self.stop_reasons,
            "empty": self.empty,
            "orphans": self.orphans,
            "other_requests": self.others,
            "other_formats": self.other_formats,
            "threads": self.threads,
            "compile_s": None if self.compile_s is None else round(self.compile_s, 2),
            **({"server": self.server} if self.server else {}),
            "out": str(self.out),
            "manifest": str(self.manifest) if self.manifest else None,
        }


def run_job(
    source: Source,
    requests_path: Path,
    out: Path,
    *,
    audio_format: str = "wav",
    dry_run: bool = False,
    force: bool = False,
    stream: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[object], None] | None = None,
) -> SynthSummary:
    """Validate everything, then synthesise into `out` (audio files + manifest.csv), resuming a
    previous run of the same command. `dry_run` stops after validation and writes nothing."""
    OutputDir.check(out, audio_format)
    planned = source.plan(requests_path, audio_format)
    outdir = OutputDir(out, audio_format, list(planned.fingerprints), requests_path)
    done = outdir.plan(planned.fingerprints, force)  # a dry run reports it too
    facts = source.facts
    summary = dict(
        resumed=len(done),
        frame_budget=planned.frame_budget,
        frame_rate=facts.frame_rate,
        orphans=outdir.orphans,
        others=list(outdir.kept),
        other_formats=outdir.other_formats,
        threads=facts.threads,
        server=facts.server,
    )
    if dry_run:
        total, rows, sources = len(planned.fingerprints), list(done.values()), planned.seed_sources
        return SynthSummary(total, 0.0, 0.0, out, None, rows, dry_run=True, seed_sources=sources, **summary)

    source.start()
    if facts.folder_first:
        outdir.open(force)
    todo = [rid for rid in planned.fingerprints if rid not in done]
    if on_start:
        on_start(len(planned.fingerprints), len(done))
    delivery = Delivery(outdir, stream, on_result)
    start = time.perf_counter()
    try:
        with interrupts_as_exceptions():
            source.run(todo, delivery.stream_to if stream else None, delivery.deliver)
    except BaseException as stopped:  # an interrupt, a failed write (a full disk), a source's failure
        delivery.discard()
        _keep_finished(stopped, outdir, facts)
        raise
    wall = time.perf_counter() - start
    recorded = source.environment()
    if recorded:
        outdir.write_environment(recorded)
    manifest, ordered = outdir.write_manifest()  # input order, whatever finished first
    seed_sources = dict(Counter(row["seed_source"] for row in ordered))
    return SynthSummary(
        len(ordered),
        sum(row["duration_s"] for row in ordered),
        wall,
        out,
        manifest,
        ordered,
        seed_sources=seed_sources,
        compile_s=source.compile_s(),
        **summary,
    )


class Delivery:
    """Where each finished request goes: its manifest record and audio file, as it finishes (with
    `stream`, a file that grew chunk by chunk, committed after its record: a kill leaves no orphan)."""

    def __init__(self, outdir: OutputDir, stream: bool, on_result) -> None:
        self.outdir, self.stream, self.on_result = outdir, stream, on_result
        self.writers: dict[str, ProgressiveAudio] = {}  # streaming: files grow chunk by chunk

    def stream_to(self, rid: str, rate: int, channels: int):
        self.writers[rid] = ProgressiveAudio(self.outdir.path(rid), rate, channels, self.outdir.format)
        return self.writers[rid].write

    def deliver(self, outcome: Outcome, result: object) -> None:
        rid, outdir = outcome.id, self.outdir
        row = manifest_row(outcome, outdir.names[rid])
        if self.stream:
            outdir.record(rid, row)  # first the record, then the file: a kill leaves no orphan
            writer = self.writers.pop(rid, None) or ProgressiveAudio(
                outdir.path(rid), outcome.sample_rate, outcome.pcm.shape[1], outdir.format
            )
            writer.commit()
        else:
            outdir.record(rid, row, outcome.pcm, outcome.sample_rate)  # as each request finishes
        if self.on_result:
            self.on_result(result)
        check_interrupted()  # a signal whose exception the audio encoder swallowed

    def discard(self) -> None:
        """A half-streamed file never appears."""
        for writer in self.writers.values():
            writer.discard()


def _keep_finished(stopped: BaseException, outdir: OutputDir, facts) -> None:
    """What finished before a run stopped stays, resumable, where the source allows it; a user
    error then says so."""
    kept = (KeyboardInterrupt, MossError) if facts.failure_keeps_manifest else KeyboardInterrupt
    if isinstance(stopped, kept) and (facts.folder_first or outdir.rows):
        outdir.write_manifest()
        if isinstance(stopped, MossError) and outdir.rows:  # as an interrupt says it (cli/common.py)
            stopped.message += (
                f"; the {len(outdir.rows)} finished output(s) are kept in {outdir.out}: run the same command "
                "again to resume"
            )
