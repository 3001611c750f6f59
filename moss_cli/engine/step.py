"""One engine step, read top-down in vLLM v1's shape: plan, execute, update.

    plan     cancel the requests the caller dropped, admit what fits (a KV slot, a random stream,
             the prompts prefilled together), lay the batch out in blocks: a `StepPlan`
    execute  the plan's blocks through the engine's step runner (runners.py: eager, compiled frame or
             whole-step graph, chosen when the engine was built): per block, the frame through the
             local transformer (frame.py: the stop head, then every codebook, each head drawn from
             uniforms every row drew from its own stream before the frame), read by the host once
             for every block
    update   the stop rule (once: `Row.ends`), finished requests out, each frame's codes kept; then
             the runner gives the rows that go on their next frame's input (`StepRunner.advance`)

`Engine` (scheduler.py) builds one `DecodeStep` and calls it until its requests are done. In
batch-invariant mode each block is padded with idle rows to the layout's fixed shape, every row
attends over its own keys only (`kv_cache.BlockedDecode`) and draws from its own stream, so a row's
tokens do not depend on its neighbours; the fast mode just does not pad.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import torch

from ..model.talker import MossTTSLocal
from ..numerics.layout import EngineLayout, StepLayout, grown
from .kv_cache import KVPool
from .prefill import prefill
from .requests import Event, FrameEvent, GenerationRequest, GenerationResult
from .sampling import random_stream

_END = object()  # the request source is exhausted


@dataclass
class Row:
    """A running request: where its keys live, its random stream, what it produced so far."""

    request: GenerationRequest
    slot: int  # where its keys and values live in the engine's KVPool
    generator: torch.Generator | None
    started: float
    first_step: int
    hidden: torch.Tensor | None = None  # backbone output for the next frame [H]
    frames: list[torch.Tensor] = field(default_factory=list)
    seen: torch.Tensor | None = None  # [n_vq, V] codes generated so far (for the repetition penalty)
    batch_size_seen: int = 1
    done: bool = False

    def ends(self, stop: bool) -> bool:
        """The stop rule: the stop head picked audio_end, and the request honours it."""
        return stop and not self.request.ignore_stop


class Waiting:
    """The requests not admitted yet, in input order. `head` is the next one; None where the source
    (a server's `Arrivals`) had nothing at the last look, which `look` repeats."""

    def __init__(self, requests: Iterable[GenerationRequest | None]) -> None:
        self._source = iter(requests)
        self.head = next(self._source, _END)

    def look(self) -> None:
        self.head = next(self._source, _END)

    def pop(self) -> GenerationRequest:
        request, self.head = self.head, next(self._source, _END)
        return request

    @property
    def ready(self) -> bool:
        return self.head is not None and self.head is not _END

    @property
    def ended(self) -> bool:
        return self.head is _END


# --- the plan: what a step computes, handed to the runner ------------------------------------


@dataclass(frozen=True)
class Block:
    """Running rows decoded together: `rows` real ones, computed as `size` rows (idle rows pad it)."""

    rows: list[Row]
    size: int


@dataclass(frozen=True)
class StepPlan:
    """A decode step: the running rows in the layout's blocks (`numerics.layout.StepLayout`)."""

    layout: StepLayout
    blocks: list[Block]


@dataclass(frozen=True)
class SettledFrame:
    """A block's frame as the host has read it: the real rows' stop flags and the block's codes
    [size, n_vq] (None where every row stopped); the whole step's next hidden states [size, H]."""

    stops: list[bool]
    codes: torch.Tensor | None
    hidden: torch.Tensor | None = None


class StepRunner(Protocol):
    """How a plan's blocks are computed (one kind per engine, `runner_for`), over the engine's KV pool."""

    pool: KVPool

    def execute(self, plan: StepPlan) -> Iterator[SettledFrame]:
        """Each block's frame, in the plan's order."""

    def advance(self, plan: StepPlan, block: Block, going: list[int], frame: SettledFrame) -> None:
        """The next frame's input of the rows that go on (their places in the block, `going`)."""


class DecodeStep:
    def __init__(
        self,
        model: MossTTSLocal,
        layout: EngineLayout,
        max_batch: int,
        runner: StepRunner,
        clock: Callable[[], float],
    ) -> None:
        self.model, self.layout, self.max_batch, self.clock = model, layout, max_batch, clock
        self.device = next(model.parameters()).device
        self.decode = layout.steps  # the decode step's layout now (a verified block grows, `grown`)
        self.count = 0  # steps so far
        self.runner = runner

    @property
    def pool(self) -> KVPool:
        """The KV pool the runner computes over (an engine hands it a new one where a run gave it back)."""
        return self.runner.pool

    @pool.setter
    def pool(self, pool: KVPool) -> None:
        self.runner.pool = pool

    def __call__(
        self, waiting: Waiting, running: list[Row], *, frames: bool, cancelled: Callable[[str], bool] | None
    ) -> Iterator[Event]:
        """One step: finished (and, with `frames`, per-frame) events as they happen; `running`
        updated in place. No step at all where nothing runs after admission."""
        yield from self.cancel(running, cancelled)
        yield from self.admit(waiting, running, cancelled)
        if not running:
            return
        yield from self.run(self.plan(running), frames)
        running[:] = [r for r in running if not r.done]
        self.count += 1

    @torch.inference_mode()
    def run(self, plan: StepPlan, frames: bool) -> Iterator[Event]:
        """Execute the plan, each block's frame updating its rows as it is read."""
        for block, frame in zip(plan.blocks, self.runner.execute(plan)):  # execute
            going = yield from self.update(block.rows, frame, frames)  # update
            if going:
                self.runner.advance(plan, block, going, frame)  # execute: the next frame's input

    # --- plan ---------------------------------------------------------------------------------

    def cancel(self, running: list[Row], cancelled: Callable[[str], bool] | None) -> Iterator[GenerationResult]:
        """A request `cancelled` names leaves the batch at once, its slot freed, with a result
        marked `cancelled`. In batch-invariant mode the others' outputs do not change."""
        if cancelled is None:
            return
        for r in [r for r in running if cancelled(r.request.key)]:
            running.remove(r)
            yield self.finish(r, stopped=False, cancelled=True)

    def admit(
        self, waiting: Waiting, running: list[Row], cancelled: Callable[[str], bool] | None
    ) -> Iterator[GenerationResult]:
        """Admit waiting requests, in input order, while the batch has room and they have arrived
        (an idle engine skips ahead to the next arrival); a request cancelled while waiting or
        asking for no frames gets its result without running."""
        admitted: list[GenerationRequest] = []
        while waiting.ready and len(running) + len(admitted) < self.max_batch:
            if waiting.head.arrival_step > self.count:
                if running or admitted:
                    break  # not arrived yet: admitted at a later step
                self.count = waiting.head.arrival_step  # idle until it arrives
            request = waiting.pop()
            dropped = cancelled is not None and cancelled(request.key)
            if dropped or request.max_new_frames <= 0:
                yield self.unrun(request, cancelled=dropped)
                continue
            admitted.append(request)
        if admitted:
            running.extend(self._start(admitted))

    @torch.inference_mode()
    def _start(self, requests: list[GenerationRequest]) -> list[Row]:
        """Slots, random streams and prefill for the requests admitted at this step (their prompts
        share forwards where the layout's `prefill` allows it)."""
        rows = []
        cfg = self.model.cfg
        for request in requests:
            slot = self.pool.allocate(request.prompt.shape[0] + request.max_new_frames)
            row = Row(request, slot, random_stream(request.rng, self.device), self.clock(), self.count)
            if request.audio.repetition_penalty != 1.0:
                row.seen = torch.zeros(cfg.n_vq, cfg.audio_vocab_size, dtype=torch.bool, device=self.device)
            rows.append(row)
        prompts = [r.request.prompt.to(self.device) for r in rows]
        hidden = prefill(self.model, self.pool, prompts, [r.slot for r in rows], self.layout.prefill)
        for row, h in zip(rows, hidden):
            row.hidden = h
        return rows

    def plan(self, running: list[Row]) -> StepPlan:
        """The batch in the layout's blocks (a one-block layout verified further first where the
        batch outgrew it)."""
        for r in running:
            r.batch_size_seen = max(r.batch_size_seen, len(running))
        self.decode = grown(self.decode, self.model, self.layout.numerics, len(running), self.max_batch)
        blocks = [Block(running[start:end], size) for start, end, size in self.decode.blocks(len(running))]
        return StepPlan(self.decode, blocks)

    # --- update -------------------------------------------------------------------------------

    def update(self, rows: Sequence[Row], frame: SettledFrame, frames: bool) -> Iterator[Event]:
        """Finish the rows the stop rule ends, keep every other row's codes (a FrameEvent each with
        `frames`), finish those whose frame budget is spent; return the block places of the rows
        that go on."""
        for r, stop in zip(rows, frame.stops):
            if r.ends(stop):
                r.done = True
                yield self.finish(r, stopped=True)
        if all(r.done for r in rows):
            return []
        going = []
        for i, r in enumerate(rows):
            if r.done:
                continue
            r.frames.append(frame.codes[i])
            if r.seen is not None:
                r.seen.scatter_(1, frame.codes[i][:, None], True)
            if frames:
                yield FrameEvent(r.request.key, frame.codes[i])
            if len(r.frames) >= r.request.max_new_frames:
                r.done = True
                yield self.finish(r, stopped=False)
            else:
                going.append(i)
        return going

    def finish(self, r: Row, *, stopped: bool, cancelled: bool = False) -> GenerationResult:
        self.pool.release(r.slot)
        codes = torch.stack(r.frames).cpu() if r.frames else self._no_codes()
        return GenerationResult(
            r.request.key,
            codes,
            stopped,
            r.batch_size_seen,
            r.first_step,
            self.count,
            self.clock() - r.started,
            r.started,
            cancelled,
        )

    def unrun(self, request: GenerationRequest, *, cancelled: bool) -> GenerationResult:
        """The result of a request never admitted: no frames asked for, or cancelled while waiting."""
        now = self.clock()
        return GenerationResult(request.key, self._no_codes(), False, 1, self.count, self.count, 0.0, now, cancelled)

    def _no_codes(self) -> torch.Tensor:
        return torch.zeros(0, self.model.cfg.n_vq, dtype=torch.long)
