"""`moss audit-determinism --ray`: the audit's engine runs (each reference request alone, each
scenario run, each shard of a `sharded` run) are spread over Ray workers and run at once; the
driver compares and reports as locally. A divergence is attributed by replaying on a worker, so
nothing is computed on the driver, which may have no accelerator."""

from __future__ import annotations

from typing import Callable, Iterator

from ..audit.runner import AuditOptions, Auditor, AuditResult
from ..audit.scenarios import Run
from .cluster import ClusterOptions, Session, driver_options, ray_session, worker_options
from .dispatch import Dispatcher, Task, VoiceBytes
from .worker import SynthWorker


class RayAuditor(Auditor):
    def __init__(self, options: AuditOptions, session: Session) -> None:
        super().__init__(options)
        self.session = session
        self.voices = VoiceBytes(session.ray)
        worker = worker_options(self.synth, session.cluster)
        workers = session.start(SynthWorker, worker, self.synth.device.type, worker.batch_invariant)
        # One engine run per worker at a time: a run's batches are the scenario's, not a mix of runs.
        self.dispatcher = Dispatcher(
            session.ray,
            workers,
            capacity=1,
            max_attempts=session.cluster.max_attempts,
            environment=session.environment if worker.batch_invariant else None,
            on_event=session.on_event,
        )

    def _execute_all(self, runs: list[Run]) -> Iterator[dict]:
        """Every piece of every run is sent at once; each run's outputs come back in order."""
        perturb = self.options.perturb
        tasks, owner = [], {}
        for index, run in enumerate(runs):
            for number, (prepared, max_batch) in enumerate(run.pieces()):
                key = f"run {index} ({run.label}) part {number + 1}"  # labels repeat across scenarios
                voices = self.voices.of(prepared)
                owner[key] = (index, prepared)
                tasks.append(
                    Task(
                        key,
                        lambda w, p=prepared, b=max_batch, s=run.stream, v=voices: w.run.remote(p, b, s, perturb, v),
                    )
                )
        remaining = [len(run.pieces()) for run in runs]
        outputs: list[dict] = [{} for _ in runs]
        done = 0
        for delivery in self.dispatcher.run(tasks):
            index, prepared = owner[delivery.task.key]
            outputs[index].update(self._outputs(prepared, delivery.value))
            remaining[index] -= 1
            while done < len(runs) and remaining[done] == 0:
                yield outputs[done]
                done += 1

    def _runner(self, run: Run, key: str):
        """The piece of `run` holding `key`, replayed on a worker by `_record`."""
        return (*run.piece_of(key), run.stream)

    def _record(self, piece, key: str, last_frame: int, perturb) -> dict:
        prepared, max_batch, stream = piece
        voices = self.voices.of(prepared)
        task = Task(key, lambda w: w.record.remote(prepared, max_batch, stream, key, last_frame, perturb, voices))
        return next(iter(self.dispatcher.run([task]))).value

    def _environment(self) -> dict:
        return dict(self.session.environment)  # the workers', which computed every output


def audit_on_ray(
    cluster: ClusterOptions, options: AuditOptions, *, on_event: Callable[[str], None] | None = None
) -> AuditResult:
    """The audit with its runs on Ray workers (same checks, same reports)."""
    options = AuditOptions(**{**options.__dict__, "synth": driver_options(options.synth, cluster)})
    with ray_session(cluster, on_event) as session:
        return RayAuditor(options, session).run()
