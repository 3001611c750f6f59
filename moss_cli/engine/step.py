"""One engine step, read top-down in vLLM v1's shape: plan, execute, update.

    plan     cancel the requests the caller dropped, admit what fits (a KV slot, a random stream,
             the prompts prefilled together), lay the batch out in blocks: a `StepPlan`
    execute  the plan's blocks through the step runner chosen when the engine was built: per block,
             the frame through the local transformer (frame.py: the stop head, then every codebook,
             each head drawn from uniforms every row drew from its own stream before the frame); the
             host asks the device nothing until every block's frame is drawn, then reads their stop
             flags once
    update   the stop rule (once: `Row.ends`), finished requests out, each frame's codes kept; then
             the runner gives the rows that go on their next frame's input (`advance`)

The runners (one per engine, `runner_for`):
    EagerFrames     the frame eager (a logits hook is called before each draw), then the backbone step
                    for the rows that go on
    CompiledFrames  `--compile`: the frame as one torch.compile graph, then the same backbone step
    WholeSteps      `--graphs`: the frame and every row's backbone step as one fixed-shape function
                    (`frame.whole_step`, captured as a CUDA graph on CUDA), before the host reads the
                    stop flags; the rows that go on keep its hidden states
All three read a block's inputs the same way (`BlockInputs`) and feed the backbone the same next
position (`frame.next_position`), so a row's tokens are the same whichever runs.

`Engine` (scheduler.py) builds one `DecodeStep` and calls it until its requests are done. In
batch-invariant mode each block is padded with idle rows to the layout's fixed shape, every row
attends over its own keys only (`kv_cache.BlockedDecode`) and draws from its own stream, so a row's
tokens do not depend on its neighbours; the fast mode just does not pad.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Protocol, Sequence

import torch

from ..model.talker import MossTTSLocal
from ..numerics.layout import EngineLayout, StepLayout, Steps, grown
from ..numerics.tiles import KEY_BLOCK
from .compiled import CompiledFrame, step_graphs
from .frame import (
    STOP_HEAD,
    FrameSampler,
    StepInputs,
    choose_codes,
    choose_stop,
    decode_frame,
    frame_and_logits,
    next_position,
    start_frame,
    whole_step,
)
from .kv_cache import SCRATCH, BlockedDecode, KVPool
from .prefill import prefill
from .requests import Event, FrameEvent, GenerationRequest, GenerationResult, LogitsHook
from .sampling import RowParams, draw_uniforms, random_stream

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
        pool: KVPool,
        layout: EngineLayout,
        max_batch: int,
        logits_hook: LogitsHook | None,
        clock: Callable[[], float],
    ) -> None:
        self.model, self.layout, self.max_batch, self.clock = model, layout, max_batch, clock
        self.device = next(model.parameters()).device
        self.decode = layout.steps  # the decode step's layout now (a verified block grows, `grown`)
        self.count = 0  # steps so far
        self.runner = runner_for(model, pool, layout, logits_hook)

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


# --- execute: a block's inputs, the same for every runner -------------------------------------


class BlockInputs:
    """What a block's frame reads: its rows' last hidden states, padded to the block's size, and
    the frame's sampler (`FrameSampler`)."""

    def __init__(self, model: MossTTSLocal) -> None:
        self.model = model
        self.device = next(model.parameters()).device
        self._params: dict[tuple, tuple] = {}  # see `_row_params`

    def hidden(self, block: Block) -> torch.Tensor:
        """[size, H]: each row's last backbone hidden state; zeros for idle rows (their outputs are ignored)."""
        hidden = torch.stack([r.hidden for r in block.rows])
        idle = block.size - len(block.rows)
        return torch.cat([hidden, hidden.new_zeros(idle, hidden.shape[1])]) if idle else hidden

    def sampler(self, block: Block) -> FrameSampler:
        """Every sampling row draws all its uniforms for the frame (stop head + codebooks) from its
        own stream now, so its tokens depend only on its logits and its stream; each head is then
        filtered and drawn for the whole block at once."""
        rows, idle = block.rows, block.size - len(block.rows)
        n_vq, device = self.model.cfg.n_vq, self.device
        sampling = [r for r in rows if r.request.do_sample]
        drawn = iter(draw_uniforms([r.generator for r in sampling], 1 + n_vq, device) if sampling else ())
        none = torch.zeros(1 + n_vq, device=device)  # greedy and idle rows draw nothing
        uniforms = torch.stack([next(drawn) if r.request.do_sample else none for r in rows] + [none] * idle)
        stop, audio = self._row_params(rows, block.size)
        seen = None
        if any(r.seen is not None for r in rows):
            blank = torch.zeros(n_vq, self.model.cfg.audio_vocab_size, dtype=torch.bool, device=device)
            seen = torch.stack([r.seen if r.seen is not None else blank for r in rows] + [blank] * idle)
        return FrameSampler(uniforms, stop, audio, seen)

    def _row_params(self, rows: Sequence[Row], size: int) -> tuple[RowParams, RowParams]:
        """(stop head, audio heads) parameters of a block's rows. They depend only on which requests
        sit where, which stays so for most frames, so they are kept per layout (holding the requests,
        so no id in a key is reused while it is kept)."""
        held = [r.request for r in rows] + [None] * (size - len(rows))  # None: an idle row
        key = tuple(map(id, held))
        if key not in self._params:
            if len(self._params) >= 64:  # the layouts of requests long gone
                self._params.clear()
            # Idle rows draw as the first row does (their tokens are ignored), so they ask the
            # sampler for no work of their own (an argmax, a wider short list).
            requests = [r.request for r in rows] + [rows[0].request] * (size - len(rows))
            greedy = [not r.do_sample for r in requests]
            stop = RowParams.of([r.stop for r in requests], greedy, self.device)
            audio = RowParams.of([r.audio for r in requests], greedy, self.device)
            self._params[key] = (held, stop, audio)
        return self._params[key][1:]


@dataclass(frozen=True)
class PendingFrame:
    """A block's frame as drawn on the device, before the host reads its `flags`."""

    rows: int  # the block's real rows
    flags: torch.Tensor  # bool [rows + checks]: the real rows' stop flags, then the draws' checks (`sample_rows`)
    codes: torch.Tensor | None  # [size, n_vq]
    hidden: torch.Tensor | None = None  # the whole step's next hidden states [size, H]
    redraw: Callable[[], tuple[torch.Tensor, torch.Tensor | None]] | None = None  # the frame asking the host

    def settle(self, values: list[bool]) -> SettledFrame:
        """The frame from its flags' values read on the host: drawn again where a check fired."""
        if any(values[self.rows :]):
            stops, codes = self.redraw()
            return SettledFrame(stops.tolist(), codes)
        return SettledFrame(values[: self.rows], self.codes, self.hidden)


def read_once(pending: list[PendingFrame]) -> Iterator[SettledFrame]:
    """Every block's frame from one host read of all their flags (a block's frame needs none of the
    backbone steps before it: those write other rows' keys)."""
    read = torch.cat([frame.flags for frame in pending]).tolist()  # the step's one host read
    for frame in pending:
        values, read = read[: len(frame.flags)], read[len(frame.flags) :]
        yield frame.settle(values)


def backbone_step(model: MossTTSLocal, pool: KVPool, plan: StepPlan, block: Block, going: list[int], codes) -> None:
    """The rows that go on (block places `going`) through the backbone, one `next_position` each;
    its last hidden state is their next frame's input. A padded layout keeps each row in its place
    and the block's shape (`StepLayout.places`); the other places write to the scratch slot."""
    cfg, rows = model.cfg, block.rows
    places, width = plan.layout.places(going, block.size)
    device = codes.device
    next_rows = torch.full((width, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=device)
    next_rows[:, 0, 0].fill_(cfg.pad_token_id)
    # made on the device once per composition, as the slots are
    next_rows.index_copy_(
        0, pool.ints(tuple(places)), next_position(model, codes.index_select(0, pool.ints(tuple(going))))
    )
    slots = [SCRATCH] * width
    for place, i in zip(places, going):
        slots[place] = rows[i].slot
    attention = BlockedDecode.of_slots(pool, slots)
    last = model.backbone(model.embed(next_rows), attention.positions[:, None], attention)[:, -1]
    attention.advance()
    for place, i in zip(places, going):
        rows[i].hidden = last[place]


# --- execute: the runners ---------------------------------------------------------------------


def runner_for(model: MossTTSLocal, pool: KVPool, layout: EngineLayout, logits_hook: LogitsHook | None) -> StepRunner:
    """The engine's runner: the whole step as one graph with `--graphs` (a logits hook, which a graph
    cannot call, makes the steps eager), the compiled frame with `--compile`, else eager."""
    if layout.graphs and logits_hook is None:
        return WholeSteps(model, pool, layout)
    if layout.compile and not layout.graphs:
        return CompiledFrames(model, pool, layout, logits_hook)
    return EagerFrames(model, pool, logits_hook)


class EagerFrames:
    """The frame eager, then the backbone step. With a logits hook, the hook is called before each
    draw and sees each block's frame in turn; without, every block's frame is drawn before the
    step's one host read, and a frame where a short candidate list may have cut a tie (rare) is
    drawn again, asking the host."""

    def __init__(self, model: MossTTSLocal, pool: KVPool, logits_hook: LogitsHook | None) -> None:
        self.model, self.pool, self.logits_hook = model, pool, logits_hook
        self.inputs = BlockInputs(model)

    def execute(self, plan: StepPlan) -> Iterator[SettledFrame]:
        if self.logits_hook is not None:
            for block in plan.blocks:
                stops, codes = self._hooked(block, self.inputs.hidden(block), self.inputs.sampler(block))
                yield SettledFrame(stops.tolist(), codes)
            return
        yield from read_once([self._pending(block) for block in plan.blocks])

    def _pending(self, block: Block) -> PendingFrame:
        hidden, sampler, n = self.inputs.hidden(block), self.inputs.sampler(block), len(block.rows)
        checks: list[torch.Tensor] = []
        stops, codes = decode_frame(self.model, hidden, replace(sampler, checks=checks).draw)
        flags = torch.cat([stops[:n], torch.stack(checks)]) if checks else stops[:n]
        return PendingFrame(n, flags, codes, redraw=lambda: self._hooked(block, hidden, sampler))

    def _hooked(self, block: Block, hidden: torch.Tensor, sampler: FrameSampler):
        """(stop flags [rows], codes [size, n_vq]; None when every row stopped), the logits hook
        (where there is one) called before each draw of a row still drawing."""
        model, rows, n = self.model, block.rows, len(block.rows)
        active = [True] * n  # rows still drawing in this frame

        def choose(codebook: int, logits: torch.Tensor) -> torch.Tensor:
            if self.logits_hook is not None:
                logits = logits.clone()
                for i, r in enumerate(rows):
                    if active[i]:
                        replaced = self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator)
                        if replaced is not None:
                            logits[i] = replaced
            return sampler.draw(codebook, logits)

        local_hidden, past = start_frame(model, hidden)
        stops = choose_stop(model, local_hidden, choose)[:n]
        active = [not r.ends(stop) for r, stop in zip(rows, stops.tolist())]
        if not any(active):
            return stops, None
        # Stopped and idle rows stay in the block (their codes are ignored) so its shape is fixed.
        return stops, choose_codes(model, local_hidden, past, choose)

    def advance(self, plan: StepPlan, block: Block, going: list[int], frame: SettledFrame) -> None:
        backbone_step(self.model, self.pool, plan, block, going, frame.codes)


class CompiledFrames:
    """`--compile`: the frame as one torch.compile graph (one per block shape), then the eager
    backbone step. A logits hook sees each draw's logits after the frame (the streams' states are
    the same: a frame's uniforms are drawn before it); it may only record."""

    def __init__(self, model: MossTTSLocal, pool: KVPool, layout: EngineLayout, logits_hook) -> None:
        self.model, self.pool, self.logits_hook = model, pool, logits_hook
        self.inputs = BlockInputs(model)
        fixed = layout.steps.kind is not Steps.UNPADDED
        device_type = self.inputs.device.type
        self.compiled = CompiledFrame(frame_and_logits, fixed_shape=fixed, device_type=device_type)

    def execute(self, plan: StepPlan) -> Iterator[SettledFrame]:
        if self.logits_hook is None:
            yield from read_once([self._pending(block)[0] for block in plan.blocks])
            return
        for block in plan.blocks:
            frame, logits = self._pending(block)
            stops = frame.flags.tolist()
            self._replay_hook(block.rows, stops, *logits)
            yield frame.settle(stops)

    def _pending(self, block: Block) -> tuple[PendingFrame, tuple[torch.Tensor, torch.Tensor]]:
        n = len(block.rows)
        stops, codes, stop_logits, audio_logits = self.compiled(
            self.model, self.inputs.hidden(block), self.inputs.sampler(block)
        )
        return PendingFrame(n, stops[:n], codes), (stop_logits, audio_logits)

    def _replay_hook(self, rows: Sequence[Row], stops: list[bool], stop_logits, audio_logits) -> None:
        n = len(rows)
        for codebook in range(STOP_HEAD, audio_logits.shape[0]):
            logits = stop_logits if codebook == STOP_HEAD else audio_logits[codebook]
            for i, r in enumerate(rows):
                if codebook != STOP_HEAD and r.ends(stops[i]):
                    continue
                if self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator) is not None:
                    raise ValueError("a logits hook cannot replace logits in a compiled frame")

    def advance(self, plan: StepPlan, block: Block, going: list[int], frame: SettledFrame) -> None:
        backbone_step(self.model, self.pool, plan, block, going, frame.codes)


class WholeSteps:
    """`--graphs`: each block's frame and backbone step as one fixed-shape graph (`whole_step`),
    every block before the step's one host read; then the stop rule. The backbone step runs for
    every row, the stopped ones included (they store a key in a slot about to be freed): which
    rows go on is known only after the read.

    The keys a block reads (`key_width`) are bucketed, so a generation builds a bounded number of
    shapes per block size (`compiled.StepGraphs.bound`)."""

    def __init__(self, model: MossTTSLocal, pool: KVPool, layout: EngineLayout) -> None:
        self.model, self.pool = model, pool
        self.inputs = BlockInputs(model)
        self.graphs = step_graphs(whole_step, compile=layout.compile, device_type=self.inputs.device.type)

    def execute(self, plan: StepPlan) -> Iterator[SettledFrame]:
        pending = [self._pending(block) for block in plan.blocks]
        for block, frame in zip(plan.blocks, read_once(pending)):
            self.pool.stepped(tuple(r.slot for r in block.rows))  # the graph advanced them on the device
            yield frame

    def _pending(self, block: Block) -> PendingFrame:
        rows, n = block.rows, len(block.rows)
        slots = self.pool.ints(tuple(r.slot for r in rows) + (SCRATCH,) * (block.size - n))
        inputs = StepInputs(self.inputs.hidden(block), slots, self.inputs.sampler(block))
        stops, codes, hidden = self.graphs(self.model, self.pool, inputs, key_width(self.pool, rows))
        return PendingFrame(n, stops[:n], codes, hidden)

    def advance(self, plan: StepPlan, block: Block, going: list[int], frame: SettledFrame) -> None:
        for i in going:
            block.rows[i].hidden = frame.hidden[i]


def key_width(pool: KVPool, rows: Sequence[Row]) -> int:
    """The keys each row of a block reads: the longest row's, rounded up to a power of two key
    blocks, at most the pool's positions (a few widths, so a few graphs; the width changes no bit,
    `KeyBlocks`)."""
    needed = -(-(max(pool.lengths[r.slot] for r in rows) + 1) // KEY_BLOCK)
    return min((1 << (needed - 1).bit_length()) * KEY_BLOCK, pool.keys.shape[3])
