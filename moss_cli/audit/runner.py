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
from ..errors import MossError
from ..io.outcome import Outcome
from ..measures.judgement import asr_seconds
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
    stopped: Stopped | None = None  # the audit stopped partway: what is here is what was compared before it

    @property
    def passed(self) -> bool:
        words = (self.questions or {}).get("numerics", {}).get("words") or {}  # --asr-model: the corpus's error rate
        failing = words.get("passed") is False or any(w["passed"] is False for w in words.get("scenarios", {}).values())
        return self.stopped is None and not any(case.failed for case in self.cases) and not failing


@dataclass
class Sweep:
    """What every run of an audit is judged against: the reference run and its answers, the rules, the
    mix-up log, and each request's verdict alone (known once the repeat has run)."""

    baseline: Run
    reference: dict[str, Outcome]
    rules: Rules
    mixups: MixUpLog
    alone: dict[str, Alone]


@dataclass(frozen=True)
class Stopped:
    """Why an audit stopped before its last scenario (a server that died, a scenario asked for by name
    that the server does not serve), where, and the scenarios it never ran. Its reports hold every
    comparison made before, marked incomplete; the command exits 2."""

    error: str
    scenario: str  # the scenario under way
    not_run: tuple[str, ...]  # that one (unless it had finished) and every one after it
    signum: int | None = None  # stopped by a signal (SIGINT, SIGTERM): the command exits 128 + signum

    def as_dict(self) -> dict:
        return {"error": self.error, "scenario": self.scenario, "not_run": list(self.not_run), "said": self.sentence}

    @property
    def why(self) -> str:
        return f"the audit stopped in {self.scenario}: {self.error}"

    @property
    def sentence(self) -> str:
        """What every report says of it, the same words in each format."""
        return f"INCOMPLETE: {self.why}; not run: {', '.join(self.not_run)}"


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
        heard_s = asr_seconds(opts.words)
        audited = executor.audited
        keys = [r.id for r in audited]
        by_id = {r.id: r for r in audited}
        seeded = {r.id for r in audited if r.seed is not None}
        baseline = reference_run(audited)
        planned = [(s, build_runs(s, audited, executor.target, workdir)) for s in self.scenarios if s != "seeds"]
        executed = executor.execute([baseline] + [run for _, runs in planned for run in runs])
        reference = next(executed)
        rules = executor.rules(opts, reference)
        mixups = MixUpLog(keys, rules.min_snr_db)
        found = mixups.add("reference", baseline.label, reference)
        cases = _on_paths(baseline, mixed_up("reference", baseline.label, found, reference, rules), executor)
        sweep = Sweep(baseline, reference, rules, mixups, {k: Alone(True) for k in keys})
        outputs, scenario_s, skipped, stopped = {}, {}, {}, None
        if "seeds" in self.scenarios:
            planned.append(("seeds", seed_probes(audited, executor.deploy_seeds(reference), set(rules.greedy))))
            executed = _chain(executed, executor, planned[-1][1])
        for done, (scenario, runs) in enumerate(planned):
            began = time.perf_counter()
            try:
                for run in runs:
                    got = next(executed)
                    if isinstance(got, Skipped) and scenario in (opts.scenarios or ()):
                        raise MossError(f"{scenario}, asked for by name: {got.reason}", field="--scenarios")
                    if isinstance(got, Skipped):  # every run of the scenario is (the check is made once)
                        skipped[scenario] = got.reason
                        continue
                    outputs[(scenario, run.label)] = got
                    if scenario == "repeat":  # every verdict after it rests on it, its own run's included
                        sweep.alone = {k: alone(by_id[k], reference[k], got[k], rules) for k in keys}
                    cases += self._judged(executor, sweep, scenario, run, got)
            except (MossError, KeyboardInterrupt) as e:
                not_run = tuple(s for s, _ in planned[done:])
                if isinstance(e, MossError):
                    stopped = Stopped(e.describe(), scenario, not_run)
                else:
                    signum = getattr(e, "signum", 2)
                    stopped = Stopped(f"interrupted (signal {signum})", scenario, not_run, signum)
                break
            if scenario not in skipped:
                scenario_s[scenario] = time.perf_counter() - began
        numeric_variance(cases)
        verdicts = request_verdicts(cases, keys)
        server = executor.report(verdicts)
        ran = tuple(s for s in self.scenarios if stopped is None or s not in stopped.not_run)

        def questions(judged: list[Case], requests: list[str]) -> dict:
            words = opts.words.max_wer_increase if opts.words is not None and opts.level == "speech" else None
            return answer(judged, requests, opts.level, executor.target.server, seeded, words)

        if server is not None:
            server["skipped"] = skipped
            paths = {name: path.scenario for name, path in PATHS.items()}
            unrun = {s: f"not run: {stopped.why}" for s in stopped.not_run} if stopped else {}
            server["paths"] = path_verdicts(cases, paths, ran, skipped, questions, unrun)
        return AuditResult(
            AuditOptions(**{**opts.__dict__, "scenarios": tuple(s for s in ran if s not in skipped)}),
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
            questions=self._with_asr(questions(cases, keys), heard_s),
            stopped=stopped,
        )

    def _with_asr(self, questions: dict, heard_s: float) -> dict:
        """--asr-model: which model heard the words, how they were normalized, and the ASR's seconds in this audit."""
        words = questions["numerics"].get("words")
        if words is not None:
            o = self.options.words
            words.update(model=o.model, normalizer=o.normalizer, asr_seconds=asr_seconds(o) - heard_s)
        return questions

    def _judged(self, executor: Executor, sweep: Sweep, scenario: str, run: Run, got: dict[str, Outcome]) -> list[Case]:
        """One run's cases: another request's audio first (a mix-up), then each audited member against
        its reference."""
        found = sweep.mixups.add(scenario, run.label, got)
        cases = _on_paths(run, mixed_up(scenario, run.label, found, got, sweep.rules), executor)
        for member in run.audited:
            key, judged = member.key, time.perf_counter()
            case = judge(
                scenario,
                run.label,
                key,
                sweep.reference[key],
                got[key],
                sweep.alone[key],
                sweep.rules,
                expect=member.expect,
                evidence=executor.evidence(run, key),
                attribute=executor.attribution(sweep.baseline, run, key),
                batch_item=member.batched,
                sent_alone=run.alone,
                request=member.request,
                path=run.path(key).name if executor.target.server else None,
            )
            case.wall_s = got[key].wall_s + time.perf_counter() - judged
            cases.append(case)  # its path set by judge (a server's way of answering it)
        return cases


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
