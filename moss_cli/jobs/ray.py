"""`moss synth --ray`: the job (jobs/local.py) runs on the driver as it does locally (validation,
resume plan, journal, audio files, manifest); the requests are synthesised by Ray workers."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

from ..errors import MossError
from ..pipeline import Prepared, Synthesizer, SynthOptions, SynthResult
from ..scaleout.cluster import ClusterOptions, Session, driver_options, ray_session, worker_options
from ..scaleout.dispatch import Dispatcher, Task, VoiceBytes
from ..scaleout.worker import SynthWorker
from .local import SynthSummary, synthesize

IN_FLIGHT_PER_SLOT = 2  # requests per engine slot a worker holds: a finished one is replaced at once


class RaySynth:
    """The job's `RemoteRunner` on Ray workers. `placement` says which worker delivered each request."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.placement: dict[str, int] = {}
        self.dispatcher: Dispatcher | None = None
        self.voice = VoiceBytes(session.ray)

    def start(self, synth: Synthesizer) -> None:
        options = worker_options(synth, self.session.cluster)
        workers = self.session.start(SynthWorker, options, synth.device.type, options.batch_invariant)
        cluster = self.session.cluster
        self.dispatcher = Dispatcher(
            self.session.ray,
            workers,
            capacity=IN_FLIGHT_PER_SLOT * synth.max_batch,
            max_attempts=cluster.max_attempts,
            environment=self.session.environment if options.batch_invariant else None,
            on_event=self.session.on_event,
        )

    @property
    def environment(self) -> dict | None:
        return self.session.environment or None  # the workers' (they all reported the same)

    def run(self, prepared: list[Prepared]) -> Iterator[SynthResult]:
        by_id = {p.request.id: p for p in prepared}
        tasks = (Task(p.request.id, self._submitter(p)) for p in prepared)
        for delivery in self.dispatcher.run(tasks):
            p = by_id[delivery.task.key]
            self.placement[p.request.id] = delivery.worker
            # The driver's own request and effective parameters: what was validated and journaled.
            result: SynthResult = delivery.value
            result.request, result.effective = p.request, p.effective
            yield result

    def _submitter(self, p: Prepared) -> Callable:
        voice = self.voice(p)
        return lambda worker: worker.synthesize.remote(p, voice)


def synthesize_on_ray(
    cluster: ClusterOptions,
    requests_path: Path,
    out: Path,
    options: SynthOptions,
    *,
    stream: bool = False,
    on_event: Callable[[str], None] | None = None,
    runner_seen: Callable[[RaySynth], None] | None = None,
    **job,
) -> SynthSummary:
    """`moss synth` on Ray workers: the same outputs, journal and manifest as a local run.
    `runner_seen` receives the runner once made (tests use it to find and kill a worker)."""
    if stream:
        raise MossError(
            "--stream writes each file progressively on this machine; it does not combine with --ray", field="--stream"
        )
    with ray_session(cluster, on_event) as session:
        runner = RaySynth(session)
        if runner_seen:
            runner_seen(runner)
        return synthesize(requests_path, out, driver_options(options, cluster), runner=runner, **job)
