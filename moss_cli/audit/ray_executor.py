"""`moss audit-determinism --ray`: the local engine's executor (engine_executor.py) with its pieces
(each reference request alone, each scenario run, each shard of a `sharded` run) spread over Ray
workers and run at once; the driver prepares, compares and reports as locally. A divergence is
attributed by replaying on a worker, so nothing is computed on the driver, which may have no
accelerator."""

from __future__ import annotations

from functools import partial
from typing import Callable, Iterator

from ..engine.requests import LogitsHook
from ..pipeline import Synthesizer, SynthResult
from ..scaleout.cluster import ClusterOptions, Session, driver_options, ray_session, worker_options
from ..scaleout.dispatch import Dispatcher, Task, VoiceBytes
from ..scaleout.worker import SynthWorker
from .attribution import record_logits
from .engine_executor import EngineExecutor, Replay
from .runner import AuditOptions, Auditor, AuditResult


class RayPieces:
    """An engine executor's `Pieces` on Ray workers: one engine run per worker at a time, so a
    run's batches are the scenario's, not a mix of runs."""

    def __init__(self, session: Session, synth: Synthesizer) -> None:
        self.session = session
        self.voices = VoiceBytes(session.ray)
        worker = worker_options(synth, session.cluster)
        workers = session.start(SynthWorker, worker, synth.device.type, worker.batch_invariant)
        self.dispatcher = Dispatcher(
            session.ray,
            workers,
            capacity=1,
            max_attempts=session.cluster.max_attempts,
            environment=session.environment if worker.batch_invariant else None,
            on_event=session.on_event,
        )

    def run(self, pieces: dict[str, Replay], perturb: LogitsHook | None) -> Iterator[tuple[str, list[SynthResult]]]:
        """Every piece is sent at once."""
        tasks = []
        for name, ((prepared, max_batch), stream) in pieces.items():
            voices = self.voices.of(prepared)
            tasks.append(
                Task(name, lambda w, p=prepared, b=max_batch, s=stream, v=voices: w.run.remote(p, b, s, perturb, v))
            )
        for delivery in self.dispatcher.run(tasks):
            yield delivery.task.key, delivery.value

    def record(self, replay: Replay, key: str, last_frame: int, perturb: LogitsHook | None) -> dict:
        (prepared, max_batch), stream = replay
        recorder = partial(record_logits, key=key, last_frame=last_frame, perturb=perturb)
        voices = self.voices.of(prepared)
        task = Task(key, lambda w: w.replay.remote(prepared, max_batch, stream, voices, recorder))
        return next(iter(self.dispatcher.run([task]))).value

    def environment(self) -> dict:
        return dict(self.session.environment)  # the workers', which computed every output


def audit_on_ray(
    cluster: ClusterOptions, options: AuditOptions, *, on_event: Callable[[str], None] | None = None
) -> AuditResult:
    """The audit with its runs on Ray workers (same checks, same reports)."""
    options = AuditOptions(**{**options.__dict__, "synth": driver_options(options.synth, cluster)})
    with ray_session(cluster, on_event) as session:
        return Auditor(options, EngineExecutor(options, partial(RayPieces, session))).run()
