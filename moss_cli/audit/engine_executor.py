"""The audit's runs on the local engine, through the same `Synthesizer.run` that `moss synth` uses:
a run's members become prepared requests (late ones arrive 3 engine steps apart), each piece of a
run (one request alone, one shard, or the whole run) is one engine run at the run's max batch. A
divergence of codes is explained by replaying both runs up to the diverging draw
(`attribution.attribute`). Where the pieces run is a `Pieces`: this process (`LocalPieces`) or
Ray workers (ray_executor.py); everything else is this executor's."""

from __future__ import annotations

import dataclasses
from collections import Counter
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator, Protocol

from ..config.builtin import builtin_requests
from ..config.requests import Request, parse_requests
from ..engine.compiled import builds, compile_seconds
from ..engine.requests import LogitsHook
from ..io.outcome import Outcome
from ..pipeline import Prepared, Synthesizer, SynthResult
from ..pipeline.environment import environment
from .attribution import attribute, record_logits
from .mixups import request_content
from .scenarios import Member, Run, Target
from .verdicts import Attribute, Rules

if TYPE_CHECKING:
    from .options import AuditOptions

LATE_STEPS = 3  # a staggered run's members arrive this many engine steps apart

Piece = tuple[list[Prepared], int]  # one engine run: its requests and its max batch
Replay = tuple[Piece, bool]  # a piece and whether it streams: what an attribution replays


class Pieces(Protocol):
    """Where an engine executor's pieces run."""

    def run(self, pieces: dict[str, Replay], perturb: LogitsHook | None) -> Iterator[tuple[str, list[SynthResult]]]:
        """Each piece's results with its name, in any order, once each."""

    def record(self, replay: Replay, key: str, last_frame: int, perturb: LogitsHook | None) -> dict:
        """`attribution.record_logits` of `key` over the piece, replayed where the pieces run."""

    def environment(self) -> dict:
        """What computed the outputs (as pipeline.environment reports it)."""


class LocalPieces:
    """Pieces run in this process, one after the other."""

    def __init__(self, synth: Synthesizer) -> None:
        self.synth = synth

    def _results(self, replay: Replay, hook: LogitsHook | None) -> list[SynthResult]:
        (prepared, max_batch), stream = replay
        return list(self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream))

    def run(self, pieces: dict[str, Replay], perturb: LogitsHook | None) -> Iterator[tuple[str, list[SynthResult]]]:
        for name, replay in pieces.items():
            yield name, self._results(replay, perturb)

    def record(self, replay: Replay, key: str, last_frame: int, perturb: LogitsHook | None) -> dict:
        return record_logits(lambda hook: self._results(replay, hook), key, last_frame, perturb)

    def environment(self) -> dict:
        return environment(self.synth)


class EngineExecutor:
    def __init__(self, options: AuditOptions, pieces: Callable[[Synthesizer], Pieces] = LocalPieces) -> None:
        """`pieces`: where the pieces run, made from the synthesizer that prepares them (which loads
        weights only where they run here)."""
        requests, problems = parse_requests(options.requests) if options.requests else (builtin_requests(), [])
        self.synth = Synthesizer(options.synth)
        self.prepared = {p.request.id: p for p in self.synth.prepare(requests, options.requests, problems)}
        self.max_batch = options.max_batch or self.synth.max_batch
        self.perturb = options.perturb
        self.compiling = builds(options.synth.compile, options.synth.graphs, self.synth.device.type)
        self._pieces: dict[int, list[Piece]] = {}  # id(run) -> its engine runs, prepared once
        self.target = Target(
            server=False,
            max_batch=self.max_batch,
            frame_budgets=tuple(p.max_new_frames for p in self.prepared.values()),
            chunk_schedule=tuple(self.synth.chunk_schedule),
        )
        self.runner = pieces(self.synth)

    @contextmanager
    def session(self, workdir: Path) -> Iterator[EngineExecutor]:
        yield self

    @property
    def audited(self) -> list[Request]:
        return [p.request for p in self.prepared.values()]

    @property
    def sample_rate(self) -> int:
        return self.synth.codec_config.sampling_rate

    @property
    def chunk_schedule(self) -> list[int]:
        return self.synth.chunk_schedule

    def pieces(self, run: Run) -> list[Piece]:
        """The engine runs `run` is made of, its members prepared (neighbours too) once."""
        if id(run) not in self._pieces:
            batch = 1 if run.alone else run.max_batch or self.max_batch
            self._pieces[id(run)] = [([self._prepare(m) for m in piece], batch) for piece in run.pieces()]
        return self._pieces[id(run)]

    def _prepare(self, member: Member) -> Prepared:
        prepared = self.prepared.get(member.key) if member.audited else None
        if prepared is None:
            prepared = self.synth.prepare([member.request])[0]
        return dataclasses.replace(prepared, arrival_step=LATE_STEPS * member.late) if member.late else prepared

    def outputs(self, prepared: list[Prepared], results) -> dict[str, Outcome]:
        """What the audit keeps of a piece's results (every request of it, neighbours included)."""
        seeds_used = not self.synth.options.legacy_global_rng  # the legacy global RNG ignores them
        content = {p.request.id: request_content(p, seeds_used) for p in prepared}
        return {r.request.id: r.outcome(self.sample_rate, content[r.request.id]) for r in results}

    def execute(self, runs: list[Run]) -> Iterator[dict[str, Outcome]]:
        """Every piece of every run is handed over at once; each run's outputs come back in order."""
        replays, owners = {}, {}
        for index, run in enumerate(runs):
            for number, piece in enumerate(self.pieces(run)):
                name = f"run {index} ({run.label}) part {number + 1}"  # labels repeat across scenarios
                replays[name], owners[name] = (piece, run.stream), index
        remaining = Counter(owners.values())
        outputs: list[dict] = [{} for _ in runs]
        done = 0
        for name, results in self.runner.run(replays, self.perturb):
            index = owners[name]
            outputs[index].update(self.outputs(replays[name][0][0], results))
            remaining[index] -= 1
            while done < len(runs) and remaining[done] == 0:
                yield outputs[done]
                done += 1

    def attribution(self, reference_run: Run, run: Run, key: str) -> Attribute:
        """Both runs' pieces holding `key`, replayed where the pieces run."""

        def replay(of: Run) -> Replay:
            return next(p for p in self.pieces(of) if key in {x.request.id for x in p[0]}), of.stream

        return lambda cmp: attribute(
            replay(reference_run),
            replay(run),
            key,
            cmp.first_frame,
            cmp.first_codebook,
            self.synth.talker_config.n_vq,
            self.perturb,
            record=self.runner.record,
        )

    def rules(self, options: AuditOptions, reference: dict[str, Outcome]) -> Rules:
        return Rules.of(options, self.sample_rate)

    def deploy_seeds(self, reference: dict[str, Outcome]) -> dict[str, int | None]:
        return {}

    def evidence(self, run: Run, key: str) -> str:
        return ""

    def environment(self) -> dict:
        return self.runner.environment()

    def report(self, verdicts: dict[str, dict]) -> dict | None:
        return None

    def compile_s(self) -> float | None:
        return compile_seconds() if self.compiling else None
