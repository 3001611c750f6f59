"""The one auditor: every request alone (the reference), then the scenarios' runs, each audited
request judged against its reference, whatever executes the runs: the local engine
(`engine_executor.EngineExecutor`), Ray workers (`ray_executor.RayPieces` under it) or a live speech
server (`server_executor.ServerExecutor`)."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager, Iterator, Protocol

from ..config.requests import Request
from ..io.outcome import Outcome
from ..remote.paths import PATHS
from .mixups import MixUp, MixUpLog
from .options import AuditOptions
from .questions import answer
from .scenarios import Run, Skipped, Target, build_runs, reference_run, seed_probes
from .verdicts import (
    Alone,
    Attribute,
    Case,
    Rules,
    alone,
    another_requests_audio,
    judge,
    mixed_up,
    numeric_variance,
    path_verdicts,
    request_verdicts,
)

__all__ = ["AuditOptions", "AuditResult", "Auditor", "Executor", "run_audit"]


@dataclass
class AuditResult:
    options: AuditOptions
    cases: list[Case]
    environment: dict
    reference: dict[str, Outcome]
    outputs: dict[tuple[str, str], dict[str, Outcome]]  # (scenario, run) -> request -> output
    elapsed_s: float
    sample_rate: int
    requests: list[str]
    chunk_schedule: list[int] = field(default_factory=list)  # streaming chunk sizes (the last repeats)
    mixups: list[MixUp] = field(default_factory=list)  # warnings; they do not fail the audit (failures are cases)
    scenario_s: dict[str, float] = field(default_factory=dict)  # wall time of each scenario's runs and checks
    server: dict | None = None  # a server audit: its URL, requests in flight, probes, retries
    compile_s: float | None = None  # --compile or --graphs: part of elapsed_s spent compiling or capturing
    verdicts: dict[str, dict] = field(default_factory=dict)  # request -> its verdict over every comparison
    questions: dict = field(default_factory=dict)  # the seed and numerics questions, answered apart (questions.py)

    @property
    def passed(self) -> bool:
        return not any(case.failed for case in self.cases)


class Executor(Protocol):
    """What runs an audit's compositions. `session` opens it (a server's connection, what it
    requires) and yields it; `audited` are the requests as it sends them."""

    target: Target
    sample_rate: int
    chunk_schedule: list[int]

    def session(self, workdir: Path) -> ContextManager[Executor]: ...

    @property
    def audited(self) -> list[Request]: ...

    def execute(self, runs: list[Run]) -> Iterator[dict[str, Outcome] | Skipped]:
        """Each run's outputs of its audited members, in order."""

    def rules(self, options: AuditOptions, reference: dict[str, Outcome]) -> Rules: ...

    def deploy_seeds(self, reference: dict[str, Outcome]) -> dict[str, int | None]:
        """The deploy seed each unseeded request should get (the `seeds` scenario's probes)."""

    def evidence(self, run: Run, key: str) -> str: ...

    def attribution(self, reference_run: Run, run: Run, key: str) -> Attribute | None: ...

    def environment(self) -> dict: ...

    def report(self, verdicts: dict[str, dict]) -> dict | None: ...

    def compile_s(self) -> float | None: ...


class Auditor:
    def __init__(self, options: AuditOptions, executor: Executor) -> None:
        self.options = options
        self.scenarios = options.chosen()
        self.executor = executor

    def run(self) -> AuditResult:
        with tempfile.TemporaryDirectory(prefix="moss-audit-") as workdir:  # generated voice clips
            with self.executor.session(Path(workdir)) as executor:
                return self._run_all(executor, Path(workdir))

    def _run_all(self, executor: Executor, workdir: Path) -> AuditResult:
        start, opts = time.perf_counter(), self.options
        audited = executor.audited
        keys = [r.id for r in audited]
        by_id = {r.id: r for r in audited}
        baseline = reference_run(audited)
        planned = [(s, build_runs(s, audited, executor.target, workdir)) for s in self.scenarios if s != "seeds"]
        executed = executor.execute([baseline] + [run for _, runs in planned for run in runs])
        reference = next(executed)
        rules = executor.rules(opts, reference)
        mixups = MixUpLog(keys, rules.min_snr_db)
        found = mixups.add("reference", baseline.label, reference)
        cases = _on_paths(baseline, mixed_up("reference", baseline.label, found, reference, rules), executor)
        alone_verdicts = {k: Alone(True) for k in keys}
        outputs, scenario_s, skipped = {}, {}, {}
        if "seeds" in self.scenarios:
            planned.append(("seeds", seed_probes(audited, executor.deploy_seeds(reference), set(rules.greedy))))
            executed = _chain(executed, executor, planned[-1][1])
        for scenario, runs in planned:
            began = time.perf_counter()
            for run in runs:
                got = next(executed)
                if isinstance(got, Skipped):
                    skipped[scenario] = got.reason
                    continue
                outputs[(scenario, run.label)] = got
                cases += _on_paths(
                    run, mixed_up(scenario, run.label, mixups.add(scenario, run.label, got), got, rules), executor
                )
                if scenario == "repeat":
                    alone_verdicts = {k: alone(by_id[k], reference[k], got[k], rules) for k in keys}
                for member in run.audited:
                    key, judged = member.key, time.perf_counter()
                    case = judge(
                        scenario,
                        run.label,
                        key,
                        reference[key],
                        got[key],
                        alone_verdicts[key],
                        rules,
                        expect=member.expect,
                        evidence=executor.evidence(run, key),
                        attribute=executor.attribution(baseline, run, key),
                        batch_item=member.batched,
                        sent_alone=run.alone,
                        request=member.request,
                        path=run.path(key).name if executor.target.server else None,
                    )
                    case.wall_s = got[key].wall_s + time.perf_counter() - judged
                    cases += _on_paths(run, [case], executor)
            scenario_s[scenario] = time.perf_counter() - began
        for scenario in skipped:
            del scenario_s[scenario]
        numeric_variance(cases)
        verdicts = request_verdicts(cases, keys)
        server = executor.report(verdicts)

        def questions(judged: list[Case], requests: list[str]) -> dict:
            return answer(judged, requests, opts.level, executor.target.server)

        if server is not None:
            server["skipped"] = skipped
            paths = {name: path.scenario for name, path in PATHS.items()}
            server["paths"] = path_verdicts(cases, paths, self.scenarios, skipped, questions)
        return AuditResult(
            AuditOptions(**{**opts.__dict__, "scenarios": tuple(s for s in self.scenarios if s not in skipped)}),
            cases,
            executor.environment(),
            reference,
            outputs,
            time.perf_counter() - start,
            executor.sample_rate,
            keys,
            executor.chunk_schedule,
            [m for m in mixups.found if not another_requests_audio(m)],
            scenario_s,
            server=server,
            compile_s=executor.compile_s(),
            verdicts=verdicts,
            questions=questions(cases, keys),
        )


def _on_paths(run: Run, cases: list[Case], executor: Executor) -> list[Case]:
    """`cases` of `run`, each marked with the way a server answered it (none for the engine)."""
    if executor.target.server:
        for case in cases:
            case.path = run.path(case.request).name
    return cases


def _chain(executed: Iterator, executor: Executor, runs: list[Run]) -> Iterator:
    """The runs already under way, then `runs` (planned from the reference's answers)."""
    yield from executed
    yield from executor.execute(runs)


def run_audit(options: AuditOptions) -> AuditResult:
    """The audit, on the local engine or, with `options.server`, against a live server."""
    options.chosen()  # bad options fail before any model loads or anything is sent
    if options.server is not None:
        from .server_executor import ServerExecutor

        return Auditor(options, ServerExecutor(options)).run()
    from .engine_executor import EngineExecutor

    return Auditor(options, EngineExecutor(options)).run()
