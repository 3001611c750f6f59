"""`moss synth` on this machine's engine: the job's `Source` over the pipeline's `Synthesizer`, and
the request file checked against the talker's configs and tokenizer, which the Ray source
(ray.py) plans with too."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from ..config.requests import parse_requests
from ..engine.compiled import builds, compile_seconds
from ..io.fingerprint import checkpoint_fingerprint
from ..io.resume import request_fingerprint, run_settings
from ..pipeline import Prepared, Synthesizer, SynthOptions
from ..pipeline.environment import environment
from .job import Deliver, Facts, Planned, StreamTo, SynthSummary, run_job


def engine_plan(synth: Synthesizer, requests_path: Path, audio_format: str) -> tuple[Planned, list[Prepared], dict]:
    """The request file checked before any weights load, every problem at once (those of the
    references and prompt lengths too); its prepared requests and the checkpoints' fingerprints."""
    requests, problems = parse_requests(requests_path, max_line_bytes=synth.max_line_bytes)
    prepared = synth.prepare(requests, requests_path, problems)
    checkpoints = {
        "talker": checkpoint_fingerprint(synth.talker_path),
        "codec": checkpoint_fingerprint(synth.codec_path),
    }
    settings = run_settings(synth.options, synth.dtype)
    planned = Planned(
        fingerprints={p.request.id: request_fingerprint(p, settings, audio_format, checkpoints) for p in prepared},
        seed_sources=dict(Counter(p.effective.seed_source for p in prepared)),
        frame_budget=sum(p.max_new_frames for p in prepared),
    )
    return planned, prepared, checkpoints


def engine_facts(synth: Synthesizer) -> Facts:
    return Facts(frame_rate=synth.codec_config.frame_rate, threads=synth.threads)


def engine_compile_s(synth: Synthesizer) -> float | None:
    options = synth.options
    return compile_seconds() if builds(options.compile, options.graphs, synth.device.type) else None


class EngineSource:
    """This machine's engine."""

    def __init__(self, options: SynthOptions) -> None:
        self.options = options
        self.prepared: dict[str, Prepared] = {}
        self.checkpoints: dict = {}

    def plan(self, requests_path: Path, audio_format: str) -> Planned:
        self.synth = Synthesizer(self.options)  # configs and tokenizer only: enough to bound and check the requests
        self.facts = engine_facts(self.synth)
        planned, prepared, self.checkpoints = engine_plan(self.synth, requests_path, audio_format)
        self.prepared = {p.request.id: p for p in prepared}
        return planned

    def start(self) -> None:
        self.synth.load()

    def run(self, ids: list[str], stream_to: StreamTo | None, deliver: Deliver) -> None:
        rate, channels = self.synth.codec_config.sampling_rate, self.synth.codec_config.channels
        sinks = (lambda rid: stream_to(rid, rate, channels)) if stream_to else None
        todo = [self.prepared[rid] for rid in ids]
        for result in self.synth.run(todo, stream=stream_to is not None, sinks=sinks):
            deliver(result.outcome(rate), result)

    def environment(self) -> dict:
        return environment(self.synth, self.checkpoints)

    def compile_s(self) -> float | None:
        return engine_compile_s(self.synth)


def synthesize(requests_path: Path, out: Path, options: SynthOptions, **job) -> SynthSummary:
    """`moss synth` here: the job (`job.run_job`'s keywords) on this machine's engine."""
    return run_job(EngineSource(options), requests_path, out, **job)
