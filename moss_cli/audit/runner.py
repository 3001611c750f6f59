"""Running an audit: the reference (every request alone), the scenarios, comparison, attribution."""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..config.requests import parse_requests
from ..engine.compiled import compile_seconds
from ..engine.scheduler import LogitsHook
from ..errors import MossError
from ..pipeline import Prepared, Synthesizer, SynthOptions
from ..pipeline.environment import environment
from .attribution import Attribution, attribute, codec_numeric, record_logits
from .builtin import builtin_requests
from .compare import Comparison, Output, compare, output_of
from .mixups import MixUp, MixUpLog, request_content
from .scenarios import SCENARIOS, Run, build_runs

LEVELS = ("codes", "waveform", "bitwise")


@dataclass
class AuditOptions:
    requests: Path | None = None
    synth: SynthOptions = field(default_factory=SynthOptions)
    scenarios: tuple[str, ...] = SCENARIOS
    level: str = "codes"
    min_snr_db: float = 60.0
    strict_unseeded: bool = False
    max_batch: int | None = None
    perturb: LogitsHook | None = None  # test hook: may change logits (e.g. of batched rows only)
    command: str | None = None  # the command line that asked for this audit, as the reports show it


@dataclass
class Case:
    """One audited request in one scenario run."""

    scenario: str
    run: str
    request: str
    seed_source: str
    verdict: str  # "pass" | "fail" | "unseeded"
    comparison: Comparison | None
    attribution: Attribution | None = None
    wall_s: float = 0.0  # the request's time in this run, plus comparing (and attributing) it

    @property
    def failed(self) -> bool:
        return self.verdict == "fail"

    def as_dict(self) -> dict:
        return {
            "scenario": self.scenario,
            "run": self.run,
            "request": self.request,
            "seed_source": self.seed_source,
            "verdict": self.verdict,
            "comparison": self.comparison.as_dict() if self.comparison else None,
            "attribution": self.attribution.as_dict() if self.attribution else None,
            "wall_s": self.wall_s,
        }


@dataclass
class AuditResult:
    options: AuditOptions
    cases: list[Case]
    environment: dict
    reference: dict[str, Output]
    outputs: dict[tuple[str, str], dict[str, Output]]  # (scenario, run) -> request -> output
    elapsed_s: float
    sample_rate: int
    requests: list[str]
    chunk_schedule: list[int] = field(default_factory=list)  # streaming chunk sizes (the last repeats)
    mixups: list[MixUp] = field(default_factory=list)  # warnings; they do not fail the audit
    scenario_s: dict[str, float] = field(default_factory=dict)  # wall time of each scenario's runs and checks
    server: dict | None = None  # a server audit: its URL, requests in flight, probes, retries, verdicts
    compile_s: float | None = None  # --compile: part of elapsed_s spent compiling the frame step

    @property
    def passed(self) -> bool:
        return not any(case.failed for case in self.cases)


def violates(cmp: Comparison, level: str, min_snr_db: float) -> bool:
    if level == "codes":  # unknown codes (a server that reports none): identical audio stands for them
        return not (cmp.pcm_equal if cmp.codes_equal is None else cmp.codes_equal)
    if level == "waveform":  # unknown codes: the SNR alone decides
        return cmp.codes_equal is False or (cmp.snr_db is not None and cmp.snr_db < min_snr_db)
    return not cmp.pcm_equal


class Auditor:
    def __init__(self, options: AuditOptions) -> None:
        if options.level not in LEVELS:
            raise MossError(f"unknown level {options.level!r}; expected one of {', '.join(LEVELS)}", field="--level")
        unknown = [s for s in options.scenarios if s not in SCENARIOS]
        if unknown:
            raise MossError(
                f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(SCENARIOS)}", field="--scenarios"
            )
        self.options = options
        requests, problems = parse_requests(options.requests) if options.requests else (builtin_requests(), [])
        self.synth = Synthesizer(options.synth)
        self.prepared = self.synth.prepare(requests, options.requests, problems)
        self.max_batch = options.max_batch or self.synth.max_batch

    def _outputs(self, prepared: list[Prepared], results) -> dict[str, Output]:
        seeds_used = not self.synth.options.legacy_global_rng  # the legacy global RNG ignores them
        content = {p.request.id: request_content(p, seeds_used) for p in prepared}
        return {r.request.id: output_of(r, content[r.request.id]) for r in results}

    def _run(
        self, prepared: list[Prepared], max_batch: int, hook: LogitsHook | None = None, stream: bool = False
    ) -> dict[str, Output]:
        hook = hook or self.options.perturb
        return self._outputs(prepared, self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream))

    def _execute(self, run: Run, hook: LogitsHook | None = None) -> dict[str, Output]:
        outputs = {}
        for prepared, max_batch in run.pieces():
            outputs.update(self._run(prepared, max_batch, hook, run.stream))
        return outputs

    def _execute_all(self, runs: list[Run]) -> Iterator[dict[str, Output]]:
        """Each run's outputs, in order (moss_cli.scaleout runs them on Ray workers at once)."""
        return map(self._execute, runs)

    def _runner(self, run: Run, key: str):
        """What re-runs the part of `run` that holds `key` (only as far as needed), for attribution:
        here a callable taking a logits hook, for `record`."""
        prepared, max_batch = run.piece_of(key)
        return lambda hook: self._run(prepared, max_batch, hook, run.stream)

    _record = staticmethod(record_logits)  # records a `_runner`'s logits (scaleout: on a worker)

    def _environment(self) -> dict:
        return environment(self.synth)

    def run(self) -> AuditResult:
        with tempfile.TemporaryDirectory(prefix="moss-audit-") as workdir:  # generated voice clips
            return self._run_all(Path(workdir))

    def _run_all(self, workdir: Path) -> AuditResult:
        start = time.perf_counter()
        audited = {p.request.id: p for p in self.prepared}
        reference_run = Run("alone", self.prepared, 1, alone=True)
        planned = [
            (scenario, build_runs(scenario, self.synth, self.prepared, self.max_batch, workdir))
            for scenario in self.options.scenarios
        ]
        executed = self._execute_all([reference_run] + [run for _, runs in planned for run in runs])
        reference = next(executed)
        mixups = MixUpLog(list(audited))
        mixups.add("reference", reference_run.label, reference)
        cases, outputs, scenario_s = [], {}, {}
        for scenario, runs in planned:
            began = time.perf_counter()
            for run in runs:
                got = next(executed)
                outputs[(scenario, run.label)] = got
                mixups.add(scenario, run.label, got)
                for key in audited:
                    judged = time.perf_counter()
                    case = self._judge(scenario, run, reference_run, key, reference[key], got[key])
                    case.wall_s = got[key].wall_s + time.perf_counter() - judged
                    cases.append(case)
            scenario_s[scenario] = time.perf_counter() - began
        env = self._environment()
        return AuditResult(
            self.options,
            cases,
            env,
            reference,
            outputs,
            time.perf_counter() - start,
            self.synth.codec_config.sampling_rate,
            list(audited),
            self.synth.chunk_schedule,
            mixups.warnings,
            scenario_s,
            compile_s=compile_seconds() if self.options.synth.compile else None,
        )

    def _judge(self, scenario: str, run: Run, reference_run: Run, key: str, ref: Output, out: Output) -> Case:
        cmp = compare(ref, out, self.synth.codec_config.sampling_rate)
        case = Case(scenario, run.label, key, ref.seed_source, "pass", cmp)
        if not violates(cmp, self.options.level, self.options.min_snr_db):
            return case
        if ref.seed_source == "none":
            case.verdict = "fail" if self.options.strict_unseeded else "unseeded"
            case.attribution = Attribution(
                "unseeded", "no request seed and no deploy seed: drawn from the global RNG, expected to vary"
            )
            return case
        case.verdict = "fail"
        if cmp.codes_equal:
            case.attribution = codec_numeric(cmp)
        else:
            case.attribution = attribute(
                self._runner(reference_run, key),
                self._runner(run, key),
                key,
                cmp.first_frame,
                cmp.first_codebook,
                self.synth.talker_config.n_vq,
                self.options.perturb,
                record=self._record,
            )
        return case


def run_audit(options: AuditOptions) -> AuditResult:
    return Auditor(options).run()
