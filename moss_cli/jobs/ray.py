"""`moss synth --ray`: the job (job.py) runs on the driver as it does locally (validation, resume
plan, journal, audio files, manifest); the requests are synthesised by Ray workers."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..errors import MossError
from ..pipeline import Prepared, Synthesizer, SynthOptions, SynthResult
from ..scaleout.cluster import ClusterOptions, Session, driver_options, ray_session, worker_options
from ..scaleout.dispatch import Dispatcher, Task, VoiceBytes
from ..scaleout.worker import SynthWorker
from .job import Deliver, Planned, StreamTo, SynthSummary, run_job
from .local import engine_compile_s, engine_facts, engine_plan

IN_FLIGHT_PER_SLOT = 2  # requests per engine slot a worker holds: a finished one is replaced at once


class RaySource:
    """The job's `Source` on Ray workers: the driver plans with the workers' configs (it loads no
    weights). `placement` says which worker delivered each request."""

    def __init__(self, session: Session, options: SynthOptions) -> None:
        self.session = session
        self.options = options
        self.prepared: dict[str, Prepared] = {}
        self.placement: dict[str, int] = {}
        self.dispatcher: Dispatcher | None = None
        self.voice = VoiceBytes(session.ray)

    def plan(self, requests_path: Path, audio_format: str) -> Planned:
        self.synth = Synthesizer(self.options)
        self.facts = engine_facts(self.synth)
        planned, prepared, _ = engine_plan(self.synth, requests_path, audio_format)
        self.prepared = {p.request.id: p for p in prepared}
        return planned

    def start(self) -> None:
        options = worker_options(self.synth, self.session.cluster)
        workers = self.session.start(SynthWorker, options, self.synth.device.type, options.batch_invariant)
        cluster = self.session.cluster
        self.dispatcher = Dispatcher(
            self.session.ray,
            workers,
            capacity=IN_FLIGHT_PER_SLOT * self.synth.max_batch,
            max_attempts=cluster.max_attempts,
            environment=self.session.environment if options.batch_invariant else None,
            on_event=self.session.on_event,
        )

    def run(self, ids: list[str], stream_to: StreamTo | None, deliver: Deliver) -> None:
        rate = self.synth.codec_config.sampling_rate
        tasks = (Task(rid, self._submitter(self.prepared[rid])) for rid in ids)
        for delivery in self.dispatcher.run(tasks):
            p = self.prepared[delivery.task.key]
            self.placement[p.request.id] = delivery.worker
            # The driver's own request and effective parameters: what was validated and journaled.
            result: SynthResult = delivery.value
            result.request, result.effective = p.request, p.effective
            deliver(result.outcome(rate), result)

    def _submitter(self, p: Prepared) -> Callable:
        voice = self.voice(p)
        return lambda worker: worker.synthesize.remote(p, voice)

    def environment(self) -> dict | None:
        return self.session.environment or None  # the workers' (they all reported the same)

    def compile_s(self) -> float | None:
        return engine_compile_s(self.synth)


def synthesize_on_ray(
    cluster: ClusterOptions,
    requests_path: Path,
    out: Path,
    options: SynthOptions,
    *,
    on_event: Callable[[str], None] | None = None,
    source_seen: Callable[[RaySource], None] | None = None,
    **job,
) -> SynthSummary:
    """`moss synth` on Ray workers: the same outputs, journal and manifest as a local run.
    `source_seen` receives the source once made (tests use it to find and kill a worker)."""
    if job.get("stream"):
        raise MossError(
            "--stream writes each file progressively on this machine; it does not combine with --ray", field="--stream"
        )
    with ray_session(cluster, on_event) as session:
        source = RaySource(session, driver_options(options, cluster))
        if source_seen:
            source_seen(source)
        return run_job(source, requests_path, out, **job)
