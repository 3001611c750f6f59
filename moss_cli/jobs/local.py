"""`moss synth` as a job: validate everything, then synthesise into an output directory (audio
files as each request finishes, a journal that makes re-runs resume, a manifest at the end),
stopping cleanly on SIGINT/SIGTERM. The pipeline (moss_cli.pipeline) does the synthesis."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Protocol

from ..config.requests import parse_requests
from ..engine.compiled import compile_seconds
from ..interrupts import check_interrupted, interrupts_as_exceptions
from ..io.audio import ProgressiveAudio
from ..io.fingerprint import checkpoint_fingerprint
from ..io.manifest import manifest_row
from ..io.output_dir import OutputDir
from ..io.resume import request_fingerprint, run_settings
from ..pipeline import Prepared, Synthesizer, SynthOptions, SynthResult
from ..pipeline.environment import environment

STOP_REASONS = ("stop", "max_frames", "empty")


class RemoteRunner(Protocol):
    """Synthesis somewhere else (e.g. Ray workers, moss_cli.scaleout): this process validates, plans
    the resume and writes every output; the runner only computes."""

    def start(self, synth: Synthesizer) -> None:
        """Get ready to synthesise (models load there; their errors surface here, before any output)."""

    def run(self, prepared: list[Prepared]) -> Iterable[SynthResult]:
        """Each request's result as soon as it is done, in any order, once each."""

    @property
    def environment(self) -> dict | None:
        """What computed the results (as pipeline.environment reports it), once started; None if unknown."""


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
    orphans: list[str] = field(default_factory=list)  # audio files in --out that no request of this run owns
    other_formats: list[str] = field(default_factory=list)  # this run's ids, in another format than --format
    threads: int = 1
    compile_s: float | None = None  # --compile: seconds spent compiling the frame step
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
            "other_formats": self.other_formats,
            "threads": self.threads,
            "compile_s": None if self.compile_s is None else round(self.compile_s, 2),
            **({"server": self.server} if self.server else {}),
            "out": str(self.out),
            "manifest": str(self.manifest) if self.manifest else None,
        }


def synthesize(
    requests_path: Path,
    out: Path,
    options: SynthOptions,
    *,
    audio_format: str = "wav",
    dry_run: bool = False,
    force: bool = False,
    stream: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[SynthResult], None] | None = None,
    runner: RemoteRunner | None = None,
) -> SynthSummary:
    """Validate everything, then synthesise into `out` (audio files + manifest.csv), resuming a
    previous run of the same command. `dry_run` stops after validation and writes nothing.
    `runner`: synthesise there instead of in this process (the outputs are written here all the same)."""
    OutputDir.check(out, audio_format)
    synth = Synthesizer(options)  # configs and tokenizer only: enough to bound and check the requests
    # Before any weights load; every problem at once, those of the references and prompt lengths too.
    requests, problems = parse_requests(requests_path, max_line_bytes=synth.max_line_bytes)
    prepared = synth.prepare(requests, requests_path, problems)
    outdir = OutputDir(out, audio_format, [p.request.id for p in prepared], requests_path)
    sources = dict(Counter(p.effective.seed_source for p in prepared))
    budget = sum(p.max_new_frames for p in prepared)

    # What an earlier run of the same command already finished (a dry run reports it too).
    checkpoints = {
        "talker": checkpoint_fingerprint(synth.talker_path),
        "codec": checkpoint_fingerprint(synth.codec_path),
    }
    settings = run_settings(options, synth.dtype)
    fps = {p.request.id: request_fingerprint(p, settings, audio_format, checkpoints) for p in prepared}
    done = outdir.plan(fps, force)
    if dry_run:
        return SynthSummary(
            len(prepared),
            0.0,
            0.0,
            out,
            None,
            list(done.values()),
            resumed=len(done),
            dry_run=True,
            frame_budget=budget,
            seed_sources=sources,
            frame_rate=synth.codec_config.frame_rate,
            orphans=outdir.orphans,
            other_formats=outdir.other_formats,
            threads=synth.threads,
        )

    if runner is None:
        synth.load()
    else:
        runner.start(synth)
    outdir.open(force)
    todo = [p for p in prepared if p.request.id not in done]
    if on_start:
        on_start(len(prepared), len(done))
    rate, channels = synth.codec_config.sampling_rate, synth.codec_config.channels  # no weights needed here
    writers: dict[str, ProgressiveAudio] = {}  # streaming: files grow chunk by chunk

    def sink(rid: str):
        writers[rid] = ProgressiveAudio(outdir.path(rid), rate, channels, audio_format)
        return writers[rid].write

    start = time.perf_counter()
    try:
        with interrupts_as_exceptions():
            if runner is None:
                results = synth.run(todo, stream=stream, sinks=sink if stream else None)
            else:
                results = runner.run(todo)
            for result in results:
                rid = result.request.id
                row = manifest_row(result.outcome(rate), outdir.names[rid])
                if stream:
                    outdir.record(rid, row)  # first the record, then the file: a kill leaves no orphan
                    writer = writers.pop(rid, None) or ProgressiveAudio(outdir.path(rid), rate, channels, audio_format)
                    writer.commit()
                else:
                    outdir.record(rid, row, result.pcm, rate)  # as each request finishes
                if on_result:
                    on_result(result)
                check_interrupted()  # a signal whose exception the audio encoder swallowed
    except BaseException as stopped:  # an interrupt, or a failed write (a full disk)
        for writer in writers.values():  # a half-streamed file never appears
            writer.discard()
        if isinstance(stopped, KeyboardInterrupt):
            outdir.write_manifest()
        raise
    wall = time.perf_counter() - start
    recorded = environment(synth, checkpoints) if runner is None else runner.environment
    if recorded:
        outdir.write_environment(recorded)
    manifest, ordered = outdir.write_manifest()  # input order, whatever finished first
    return SynthSummary(
        len(ordered),
        sum(r["duration_s"] for r in ordered),
        wall,
        out,
        manifest,
        ordered,
        resumed=len(done),
        frame_budget=budget,
        seed_sources=sources,
        frame_rate=synth.codec_config.frame_rate,
        orphans=outdir.orphans,
        other_formats=outdir.other_formats,
        threads=synth.threads,
        compile_s=compile_seconds() if options.compile else None,
    )
