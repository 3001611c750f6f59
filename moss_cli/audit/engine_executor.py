"""The audit's runs on the local engine, through the same `Synthesizer.run` that `moss synth` uses:
a run's members become prepared requests (late ones arrive 3 engine steps apart), each piece of a
run (one request alone, one shard, or the whole run) is one engine run at the run's max batch. A
divergence of codes is explained by replaying both runs up to the diverging draw
(`attribution.attribute`)."""

from __future__ import annotations

import dataclasses
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

from ..config.requests import Request, parse_requests
from ..engine.compiled import compile_seconds
from ..engine.scheduler import LogitsHook
from ..io.outcome import Outcome
from ..pipeline import Prepared, Synthesizer
from ..pipeline.environment import environment
from .attribution import attribute, record_logits
from .builtin import builtin_requests
from .mixups import request_content
from .scenarios import Member, Run, Target
from .verdicts import Attribute, Rules

if TYPE_CHECKING:
    from .options import AuditOptions

LATE_STEPS = 3  # a staggered run's members arrive this many engine steps apart

Piece = tuple[list[Prepared], int]  # one engine run: its requests and its max batch


class EngineExecutor:
    def __init__(self, options: AuditOptions) -> None:
        requests, problems = parse_requests(options.requests) if options.requests else (builtin_requests(), [])
        self.synth = Synthesizer(options.synth)
        self.prepared = {p.request.id: p for p in self.synth.prepare(requests, options.requests, problems)}
        self.max_batch = options.max_batch or self.synth.max_batch
        self.perturb = options.perturb
        self.compiling = options.synth.compile
        self._pieces: dict[int, list[Piece]] = {}  # id(run) -> its engine runs, prepared once
        self.target = Target(
            server=False,
            max_batch=self.max_batch,
            frame_cap=self.synth.deploy.max_tokens,
            frame_budgets=tuple(p.max_new_frames for p in self.prepared.values()),
            chunk_schedule=tuple(self.synth.chunk_schedule),
        )

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

    def run_piece(self, piece: Piece, stream: bool, hook: LogitsHook | None = None) -> dict[str, Outcome]:
        prepared, max_batch = piece
        results = self.synth.run(prepared, max_batch=max_batch, logits_hook=hook or self.perturb, stream=stream)
        return self.outputs(prepared, results)

    def execute(self, runs: list[Run]) -> Iterator[dict[str, Outcome]]:
        for run in runs:
            outputs = {}
            for piece in self.pieces(run):
                outputs.update(self.run_piece(piece, run.stream))
            yield outputs

    def attribution(self, reference_run: Run, run: Run, key: str) -> Attribute:
        def replayer(of: Run):
            piece = next(p for p in self.pieces(of) if key in {x.request.id for x in p[0]})
            return lambda hook: self.run_piece(piece, of.stream, hook)

        return lambda cmp: attribute(
            replayer(reference_run),
            replayer(run),
            key,
            cmp.first_frame,
            cmp.first_codebook,
            self.synth.talker_config.n_vq,
            self.perturb,
            record=record_logits,
        )

    def rules(self, options: AuditOptions, reference: dict[str, Outcome]) -> Rules:
        return Rules(options.level, options.min_snr_db, options.strict_unseeded, self.sample_rate)

    def deploy_seeds(self, reference: dict[str, Outcome]) -> dict[str, int | None]:
        return {}

    def evidence(self, run: Run, key: str) -> str:
        return ""

    def environment(self) -> dict:
        return environment(self.synth)

    def report(self, verdicts: dict[str, dict]) -> dict | None:
        return None

    def compile_s(self) -> float | None:
        return compile_seconds() if self.compiling else None
