"""`moss audit-determinism --ray`: the audit's engine runs (each reference request alone, each
scenario run, each shard of a `sharded` run) are spread over Ray workers and run at once; the
driver compares and reports as locally. A divergence is attributed by replaying on a worker, so
nothing is computed on the driver, which may have no accelerator."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from ..audit.attribution import attribute
from ..audit.engine_executor import EngineExecutor, Piece
from ..audit.runner import AuditOptions, Auditor, AuditResult
from ..audit.scenarios import Run
from ..audit.verdicts import Attribute
from ..io.outcome import Outcome
from .cluster import ClusterOptions, Session, driver_options, ray_session, worker_options
from .dispatch import Dispatcher, Task, VoiceBytes
from .worker import SynthWorker


class RayExecutor:
    """The local engine's compositions (prepared on the driver, as `EngineExecutor` prepares them),
    each piece run on a worker."""

    def __init__(self, options: AuditOptions, ray: Session) -> None:
        self.local = EngineExecutor(options)  # prepares; computes nothing
        self.ray = ray
        self.voices = VoiceBytes(ray.ray)
        self.perturb = options.perturb
        worker = worker_options(self.local.synth, ray.cluster)
        workers = ray.start(SynthWorker, worker, self.local.synth.device.type, worker.batch_invariant)
        # One engine run per worker at a time: a run's batches are the scenario's, not a mix of runs.
        self.dispatcher = Dispatcher(
            ray.ray,
            workers,
            capacity=1,
            max_attempts=ray.cluster.max_attempts,
            environment=ray.environment if worker.batch_invariant else None,
            on_event=ray.on_event,
        )
        self.target, self.audited = self.local.target, self.local.audited
        self.sample_rate, self.chunk_schedule = self.local.sample_rate, self.local.chunk_schedule
        self.rules, self.deploy_seeds = self.local.rules, self.local.deploy_seeds
        self.evidence, self.report, self.compile_s = self.local.evidence, self.local.report, self.local.compile_s

    @contextmanager
    def session(self, workdir: Path) -> Iterator[RayExecutor]:
        yield self

    def execute(self, runs: list[Run]) -> Iterator[dict[str, Outcome]]:
        """Every piece of every run is sent at once; each run's outputs come back in order."""
        perturb = self.perturb
        tasks, owner = [], {}
        for index, run in enumerate(runs):
            for number, (prepared, max_batch) in enumerate(self.local.pieces(run)):
                key = f"run {index} ({run.label}) part {number + 1}"  # labels repeat across scenarios
                voices = self.voices.of(prepared)
                owner[key] = (index, prepared)
                tasks.append(
                    Task(
                        key,
                        lambda w, p=prepared, b=max_batch, s=run.stream, v=voices: w.run.remote(p, b, s, perturb, v),
                    )
                )
        remaining = [len(self.local.pieces(run)) for run in runs]
        outputs: list[dict] = [{} for _ in runs]
        done = 0
        for delivery in self.dispatcher.run(tasks):
            index, prepared = owner[delivery.task.key]
            outputs[index].update(self.local.outputs(prepared, delivery.value))
            remaining[index] -= 1
            while done < len(runs) and remaining[done] == 0:
                yield outputs[done]
                done += 1

    def attribution(self, reference_run: Run, run: Run, key: str) -> Attribute:
        """Both runs' pieces holding `key`, replayed on a worker."""

        def piece(of: Run) -> tuple[Piece, bool]:
            return next(p for p in self.local.pieces(of) if key in {x.request.id for x in p[0]}), of.stream

        return lambda cmp: attribute(
            piece(reference_run),
            piece(run),
            key,
            cmp.first_frame,
            cmp.first_codebook,
            self.local.synth.talker_config.n_vq,
            self.perturb,
            record=self._record,
        )

    def _record(self, replay: tuple[Piece, bool], key: str, last_frame: int, perturb) -> dict:
        (prepared, max_batch), stream = replay
        voices = self.voices.of(prepared)
        task = Task(key, lambda w: w.record.remote(prepared, max_batch, stream, key, last_frame, perturb, voices))
        return next(iter(self.dispatcher.run([task]))).value

    def environment(self) -> dict:
        return dict(self.ray.environment)  # the workers', which computed every output


def audit_on_ray(
    cluster: ClusterOptions, options: AuditOptions, *, on_event: Callable[[str], None] | None = None
) -> AuditResult:
    """The audit with its runs on Ray workers (same checks, same reports)."""
    options = AuditOptions(**{**options.__dict__, "synth": driver_options(options.synth, cluster)})
    with ray_session(cluster, on_event) as session:
        return Auditor(options, RayExecutor(options, session)).run()
