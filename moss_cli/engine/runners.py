"""How a decode step's plan is computed: the step runners, one per engine (`runner_for`, called
when the engine is built), in vLLM v1's place of the model runner (step.py is the scheduler's side).

    EagerFrames     the frame eager (a logits hook is called before each draw), then the backbone step
                    for the rows that go on
    CompiledFrames  `--compile`: the frame as one torch.compile graph, then the same backbone step
    WholeSteps      `--graphs`: the frame and every row's backbone step as one fixed-shape function
                    (`frame.whole_step`, captured as a CUDA graph on CUDA), before the host reads the
                    stop flags; the rows that go on keep its hidden states

All three read a block's inputs the same way (`BlockInputs`) and feed the backbone the same next
position (`frame.next_position`), so a row's tokens are the same whichever runs. The host asks the
device nothing until every block's frame is drawn, then reads their stop flags once (`read_once`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Iterator, Sequence

import torch

from ..model.talker import MossTTSLocal
from ..numerics.layout import EngineLayout, Steps
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
from .requests import LogitsHook
from .sampling import RowParams, draw_uniforms
from .step import Block, Row, SettledFrame, StepPlan, StepRunner

# --- a block's inputs, the same for every runner ----------------------------------------------


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


def backbone_step(
    model: MossTTSLocal, pool: KVPool, plan: StepPlan, block: Block, going: list[int], codes: torch.Tensor
) -> None:
    """The rows that go on (block places `going`, their `codes` [size, n_vq]) through the backbone, one
    `next_position` each; its last hidden state is their next frame's input. A padded layout keeps each
    row in its place and the block's shape (`StepLayout.places`); the other places hold pad tokens and
    write to the scratch slot."""
    cfg, rows = model.cfg, block.rows
    places, width = plan.layout.places(going, block.size)
    next_rows = torch.full((width, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=codes.device)
    next_rows[:, 0, 0].fill_(cfg.pad_token_id)
    at, going_rows = pool.ints(tuple(places)), pool.ints(tuple(going))  # on the device once per composition
    next_rows.index_copy_(0, at, next_position(model, codes.index_select(0, going_rows)))
    slots = [SCRATCH] * width
    for place, i in zip(places, going):
        slots[place] = rows[i].slot
    attention = BlockedDecode.of_slots(pool, slots)
    last = model.backbone(model.embed(next_rows), attention.positions[:, None], attention)[:, -1]
    attention.advance()
    for place, i in zip(places, going):
        rows[i].hidden = last[place]


# --- the runners ------------------------------------------------------------------------------


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

    def __init__(self, model: MossTTSLocal, pool: KVPool, layout: EngineLayout, logits_hook: LogitsHook | None) -> None:
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
    shapes per block size (`compiled.shapes_bound`)."""

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
