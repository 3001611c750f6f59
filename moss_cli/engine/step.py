"""One engine step, read top-down in vLLM v1's shape: plan, execute, update.

    plan     cancel the requests the caller dropped, admit what fits (a KV slot, a random stream,
             the prompts prefilled together), lay the batch out in blocks (`numerics.layout.StepLayout`)
    execute  per block, the frame through the local transformer: the stop head, then every
             codebook, each head drawn by the sampler (`sampling.sample_rows`) from uniforms every
             row drew from its own stream before the frame; the host asks the device nothing
             until every block's frame is drawn, then reads their stop flags once (`settled`)
    update   the stop rule (once: `Row.ends`), finished requests out, each frame's codes kept;
             then the backbone step for the rows that go on (its last hidden state is the next
             frame's input)

With `--graphs` (`EngineLayout.graphs`) execute and the backbone step are one fixed-shape function
per block (`whole_step`, captured as a CUDA graph on CUDA): the backbone step then runs for every
row, before the host reads the stop flags; update is the same.

`Engine` (scheduler.py) builds one `DecodeStep` and calls it until its requests are done. In
batch-invariant mode each block is padded with idle rows to the layout's fixed shape, every row
attends over its own keys only (`kv_cache.BlockedDecode`) and draws from its own stream, so a row's
tokens do not depend on its neighbours; the fast mode just does not pad.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Iterable, Iterator, Sequence

import torch

from ..model.local import LocalPast
from ..model.talker import STOP, MossTTSLocal
from ..numerics.layout import EngineLayout, Steps, grown
from ..numerics.tiles import KEY_BLOCK
from .compiled import CompiledFrame, step_graphs
from .kv_cache import SCRATCH, BlockedDecode, KVPool
from .prefill import prefill
from .requests import Event, FrameEvent, GenerationRequest, GenerationResult, LogitsHook
from .sampling import RowParams, draw_uniforms, random_stream, sample_rows

STOP_HEAD = -1  # the codebook index of the stop head, for choosers and the logits hook
# (codebook, logits [B, V]) -> codes [B]; codebook -1 is the stop head (logits [B, 2]).
Chooser = Callable[[int, torch.Tensor], torch.Tensor]
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
        self.model, self.pool, self.layout, self.max_batch = model, pool, layout, max_batch
        self.logits_hook, self.clock = logits_hook, clock
        self.device = next(model.parameters()).device
        self.decode = layout.steps  # the decode step's layout now (a verified block grows, `grown`)
        self.count = 0  # steps so far
        # torch.compile of the frame (local transformer, heads, sampler): one graph per block shape.
        fixed = self.decode.kind is not Steps.UNPADDED
        self.compiled = None
        if layout.compile and not layout.graphs:
            self.compiled = CompiledFrame(sample_frame, fixed_shape=fixed, device_type=self.device.type)
        self._params: dict[tuple, tuple] = {}  # see _row_params
        # --graphs: each block's whole step (frame and backbone step) as one fixed-shape graph; a
        # logits hook, which a graph cannot call, makes the steps eager.
        self.graphs = None
        if layout.graphs:
            self.graphs = step_graphs(whole_step, compile=layout.compile, device_type=self.device.type)

    def __call__(
        self, waiting: Waiting, running: list[Row], *, frames: bool, cancelled: Callable[[str], bool] | None
    ) -> Iterator[Event]:
        """One step: finished (and, with `frames`, per-frame) events as they happen; `running`
        updated in place. No step at all where nothing runs after admission."""
        yield from self.cancel(running, cancelled)
        yield from self.admit(waiting, running, cancelled)
        if not running:
            return
        yield from self.blocks(running, frames)
        running[:] = [r for r in running if not r.done]
        self.count += 1

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

    @torch.inference_mode()
    def blocks(self, running: list[Row], frames: bool) -> Iterator[Event]:
        """The batch in the layout's blocks (a one-block layout verified further first where the
        batch outgrew it), each decoded as one frame and one backbone step."""
        for r in running:
            r.batch_size_seen = max(r.batch_size_seen, len(running))
        self.decode = grown(self.decode, self.model, self.layout.numerics, len(running), self.max_batch)
        blocks = [(running[start:end], size) for start, end, size in self.decode.blocks(len(running))]
        if self.graphs is not None and self.logits_hook is None:
            yield from self.whole_steps(blocks, frames)
            return
        for (rows, size), (stops, codes) in zip(blocks, self.settled(blocks)):
            going = yield from self.update(rows, stops, codes, frames)  # update
            if going:
                self.backbone(rows, going, codes, size)  # execute: the backbone step

    def settled(self, blocks: list[tuple[list[Row], int]]) -> Iterator[tuple[list[bool], torch.Tensor | None]]:
        """Each block's (stop flags of its real rows, codes). With no logits hook, every block's
        frame is drawn before the step's one host read (a block's frame needs none of the backbone
        steps before it: those write other rows' keys); a hook sees each block's draws in turn."""
        if self.logits_hook is not None:
            for rows, size in blocks:
                frame = self.frame(rows, size)
                yield frame.settle(frame.flags.tolist())
            return
        drawn = [self.frame(rows, size) for rows, size in blocks]  # execute: the frames
        read = torch.cat([frame.flags for frame in drawn]).tolist()  # the step's one host read
        for frame in drawn:
            values, read = read[: len(frame.flags)], read[len(frame.flags) :]
            yield frame.settle(values)

    # --- execute and update: the whole step as one graph (--graphs) --------------------------

    def whole_steps(self, blocks: list[tuple[list[Row], int]], frames: bool) -> Iterator[Event]:
        """Each block's frame and backbone step as one fixed-shape graph (`whole_step`), every block
        before the step's one host read; then the stop rule. The backbone step runs for every row,
        the stopped ones included (they store a key in a slot about to be freed): which rows go on
        is known only after the read."""
        stepped = [self.whole(rows, size) for rows, size in blocks]
        read = torch.cat([stops for stops, _, _ in stepped]).tolist()  # the step's one host read
        for (rows, _), (_, codes, hidden) in zip(blocks, stepped):
            stops, read = read[: len(rows)], read[len(rows) :]
            self.pool.stepped(tuple(r.slot for r in rows))  # the graph advanced them on the device
            going = yield from self.update(rows, stops, codes, frames)
            for i in going:
                rows[i].hidden = hidden[i]

    def whole(self, rows: Sequence[Row], size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """A block's whole step: (stop flags [rows], codes [size, n_vq], next hidden [size, H])."""
        n = len(rows)
        hidden = torch.stack([r.hidden for r in rows])
        if size > n:  # idle rows: zeros in, the scratch slot, ignored out
            hidden = torch.cat([hidden, hidden.new_zeros(size - n, hidden.shape[1])])
        slots = self.pool.ints(tuple(r.slot for r in rows) + (SCRATCH,) * (size - n))
        inputs = StepInputs(hidden, slots, self._frame_draws(rows, size))
        stops, codes, hidden = self.graphs(self.model, self.pool, inputs, self._width(rows))
        return stops[:n], codes, hidden

    def _width(self, rows: Sequence[Row]) -> int:
        """The keys each row of a block reads: the longest row's, rounded up to a power of two key
        blocks (a few widths, so a few graphs; the width changes no bit, `KeyBlocks`)."""
        needed = -(-(max(self.pool.lengths[r.slot] for r in rows) + 1) // KEY_BLOCK)
        return min((1 << (needed - 1).bit_length()) * KEY_BLOCK, self.pool.keys.shape[3])

    # --- execute: the frame -------------------------------------------------------------------

    def frame(self, rows: Sequence[Row], size: int) -> DrawnFrame:
        """A block's frame, drawn on the device (the host asks nothing, unless a logits hook is
        called). Eager, the hook is called before each draw; a compiled frame is one graph, whose
        logits the hook sees afterwards."""
        n = len(rows)
        hidden = torch.stack([r.hidden for r in rows])
        if size > n:  # idle rows: zeros in, ignored out
            hidden = torch.cat([hidden, hidden.new_zeros(size - n, hidden.shape[1])])
        draws = self._frame_draws(rows, size)
        if self.compiled is not None:
            stop_flags, codes, stop_logits, audio_logits = self.compiled(self.model, hidden, draws)
            if self.logits_hook is not None:
                self._replay_hook(rows, stop_flags[:n].tolist(), stop_logits, audio_logits)
            return DrawnFrame(n, stop_flags[:n], codes)
        if self.logits_hook is not None:
            return DrawnFrame(n, *self._eager_frame(rows, hidden, draws))
        # Where a short candidate list may have cut a tie (rare), the frame again, asking the host.
        checks: list[torch.Tensor] = []
        stops, codes = draw_frame(self.model, hidden, replace(draws, checks=checks).draw)
        flags = torch.cat([stops[:n], torch.stack(checks)]) if checks else stops[:n]
        return DrawnFrame(n, flags, codes, lambda: self._eager_frame(rows, hidden, draws))

    def _eager_frame(self, rows: Sequence[Row], hidden: torch.Tensor, draws: FrameDraws):
        """(stop flags [rows], codes [size, n_vq]; None when every row stopped), the logits hook
        called before each draw of a row still drawing."""
        model, n = self.model, len(rows)
        active = [True] * n  # rows still drawing in this frame

        def choose(codebook: int, logits: torch.Tensor) -> torch.Tensor:
            if self.logits_hook is not None:
                logits = logits.clone()
                for i, r in enumerate(rows):
                    if active[i]:
                        replaced = self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator)
                        if replaced is not None:
                            logits[i] = replaced
            return draws.draw(codebook, logits)

        local_hidden, past = start_frame(model, hidden)
        stops = choose_stop(model, local_hidden, choose)[:n]
        active = [not r.ends(stop) for r, stop in zip(rows, stops.tolist())]
        if not any(active):
            return stops, None
        # Stopped and idle rows stay in the block (their codes are ignored) so its shape is fixed.
        return stops, choose_codes(model, local_hidden, past, choose)

    def _replay_hook(self, rows: Sequence[Row], stops: list[bool], stop_logits, audio_logits) -> None:
        """A compiled frame has no callbacks: the hook sees each draw's logits after the frame (the
        streams' states are the same: a frame's uniforms are drawn before it). It may only record."""
        n = len(rows)
        for codebook in range(STOP_HEAD, audio_logits.shape[0]):
            logits = stop_logits if codebook == STOP_HEAD else audio_logits[codebook]
            for i, r in enumerate(rows):
                if codebook != STOP_HEAD and r.ends(stops[i]):
                    continue
                if self.logits_hook(r.request.key, len(r.frames), codebook, logits[i], n, r.generator) is not None:
                    raise ValueError("a logits hook cannot replace logits in a compiled frame")

    def _frame_draws(self, rows: Sequence[Row], size: int) -> FrameDraws:
        """Every sampling row draws all its uniforms for the frame (stop head + codebooks) from its
        own stream now, so its tokens depend only on its logits and its stream; each head is then
        filtered and drawn for the whole block at once."""
        n_vq, device = self.model.cfg.n_vq, self.device
        sampling = [r for r in rows if r.request.do_sample]
        drawn = iter(draw_uniforms([r.generator for r in sampling], 1 + n_vq, device) if sampling else ())
        none = torch.zeros(1 + n_vq, device=device)  # greedy and idle rows draw nothing
        idle = [none] * (size - len(rows))
        uniforms = torch.stack([next(drawn) if r.request.do_sample else none for r in rows] + idle)
        stop, audio = self._row_params(rows, size)
        seen = None
        if any(r.seen is not None for r in rows):
            blank = torch.zeros(n_vq, self.model.cfg.audio_vocab_size, dtype=torch.bool, device=device)
            seen = torch.stack([r.seen if r.seen is not None else blank for r in rows] + [blank] * (size - len(rows)))
        return FrameDraws(uniforms, stop, audio, seen)

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

    # --- update -------------------------------------------------------------------------------

    def update(
        self, rows: Sequence[Row], stops: list[bool], codes: torch.Tensor | None, frames: bool
    ) -> Iterator[Event]:
        """Finish the rows the stop rule ends, keep every other row's codes (a FrameEvent each with
        `frames`), finish those whose frame budget is spent; return the block places of the rows
        that go on."""
        for r, stop in zip(rows, stops):
            if r.ends(stop):
                r.done = True
                yield self.finish(r, stopped=True)
        if all(r.done for r in rows):
            return []
        going = []
        for i, r in enumerate(rows):
            if r.done:
                continue
            r.frames.append(codes[i])
            if r.seen is not None:
                r.seen.scatter_(1, codes[i][:, None], True)
            if frames:
                yield FrameEvent(r.request.key, codes[i])
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

    # --- execute: the backbone step -----------------------------------------------------------

    def backbone(self, rows: Sequence[Row], going: list[int], codes: torch.Tensor, size: int) -> None:
        """Feed the rows that go on (block places `going`) to the backbone: one new position each,
        `[audio_assistant_slot, c_0..c_{n_vq-1}]`; its last hidden state is their next frame's input.
        A padded layout keeps each row in its place and the block's shape (`StepLayout.places`)."""
        model, cfg = self.model, self.model.cfg
        places, width = self.decode.places(going, size)
        at = self.pool.ints(tuple(places))  # made on the device once per composition, as the slots are
        next_rows = torch.full((width, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=self.device)
        text, audio = next_rows[:, 0, 0], next_rows[:, 0, 1:]
        text.fill_(cfg.pad_token_id).index_fill_(0, at, cfg.audio_assistant_slot_token_id)
        audio.index_copy_(0, at, codes.index_select(0, self.pool.ints(tuple(going))))
        slots = [SCRATCH] * width  # stopped and idle rows write to the scratch slot; their outputs are ignored
        for place, i in zip(places, going):
            slots[place] = rows[i].slot
        attention = BlockedDecode.of_slots(self.pool, slots)
        positions = attention.positions[:, None]
        last = model.backbone(model.embed(next_rows), positions, attention)[:, -1]
        attention.advance()
        for place, i in zip(places, going):
            rows[i].hidden = last[place]


# --- the frame through the local transformer (the engine's, the compiled graph's, the reference's) ---


def start_frame(model: MossTTSLocal, hidden: torch.Tensor) -> tuple[torch.Tensor, LocalPast]:
    """Local position 0 from the backbone's last hidden state [B, H] -> (local hidden [B, H], past)."""
    out, past = model.local(hidden.unsqueeze(1), 0)
    return out[:, -1], past


def choose_stop(model: MossTTSLocal, local_hidden: torch.Tensor, choose: Chooser) -> torch.Tensor:
    """[B] bool: True where the stop head picks audio_end."""
    return choose(STOP_HEAD, model.stop_logits(local_hidden)).eq(STOP)


def choose_codes(model: MossTTSLocal, local_hidden: torch.Tensor, past: LocalPast, choose: Chooser) -> torch.Tensor:
    """Sample codebooks 0..n_vq-1 in order, each feeding the next local position -> codes [B, n_vq]."""
    n_vq = model.cfg.n_vq
    codes = []
    for k in range(n_vq):
        c = choose(k, model.audio_logits(k, local_hidden))
        codes.append(c)
        if k + 1 < n_vq:
            out, past = model.local(model.code_embedding(k, c), k + 1, past)
            local_hidden = out[:, -1]
    return torch.stack(codes, dim=-1)


@dataclass(frozen=True)
class FrameDraws:
    """What a block's rows draw one frame from: each row's uniforms for every head, drawn from its
    own stream before the frame, and per-row sampling parameters; a row's tokens then depend only
    on its logits and these."""

    uniforms: torch.Tensor  # [rows, 1 + n_vq]: the stop head, then codebooks 0..n_vq-1
    stop: RowParams
    audio: RowParams
    seen: torch.Tensor | None = None  # [rows, n_vq, V] codes already produced (repetition penalty)
    # A list: the draws ask the host nothing and note here where a short list may have cut a tie
    # (`sample_rows`); None: they ask.
    checks: list[torch.Tensor] | None = None

    def draw(self, codebook: int, logits: torch.Tensor) -> torch.Tensor:
        column = self.uniforms.narrow(1, 1 + codebook, 1)  # [rows, 1]; the stop head's is column 0
        if codebook == STOP_HEAD:
            return sample_rows(logits, self.stop, column, checks=self.checks)
        marks = None if self.seen is None else self.seen[:, codebook, : logits.shape[-1]]
        return sample_rows(logits, self.audio, column, marks, self.checks)


@dataclass(frozen=True)
class DrawnFrame:
    """A block's frame as drawn on the device, before the host reads its `flags`."""

    rows: int  # the block's real rows
    flags: torch.Tensor  # bool [rows + checks]: the real rows' stop flags, then the draws' checks (`sample_rows`)
    codes: torch.Tensor | None  # [size, n_vq]
    redraw: Callable[[], tuple[torch.Tensor, torch.Tensor | None]] | None = None  # the frame asking the host

    def settle(self, values: list[bool]) -> tuple[list[bool], torch.Tensor | None]:
        """(stop flags, codes) from the flags' values read on the host: drawn again where a check fired."""
        if any(values[self.rows :]):
            stops, codes = self.redraw()
            return stops.tolist(), codes
        return values[: self.rows], self.codes


def draw_frame(model: MossTTSLocal, hidden: torch.Tensor, choose: Chooser) -> tuple[torch.Tensor, torch.Tensor]:
    """A whole frame for a block: hidden [B, H] -> (stop [B] bool, codes [B, n_vq]). Every row gets
    codes, also rows whose stop head fired (the caller ignores them)."""
    local_hidden, past = start_frame(model, hidden)
    stops = choose_stop(model, local_hidden, choose)
    return stops, choose_codes(model, local_hidden, past, choose)


def sample_frame(
    model: MossTTSLocal, hidden: torch.Tensor, draws: FrameDraws
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """`draw_frame` with no callbacks (so it can be compiled into one graph), keeping its logits:
    hidden [B, H] -> (stop [B] bool, codes [B, n_vq], stop logits [B, 2], audio logits [n_vq, B, V])."""
    heads: list[torch.Tensor] = []

    def keep(codebook: int, logits: torch.Tensor) -> torch.Tensor:
        heads.append(logits)
        return draws.draw(codebook, logits)

    stops, codes = draw_frame(model, hidden, keep)
    return stops, codes, heads[0], torch.stack(heads[1:])


@dataclass(frozen=True)
class StepInputs:
    """What a block's whole step reads: tensors on the device in fixed shapes, so a graph captured
    for one set replays for another (`compiled.StepGraphs` copies them into its own)."""

    hidden: torch.Tensor  # [size, H]: each row's last backbone hidden state (zeros for idle rows)
    slots: torch.Tensor  # long [size]: each row's pool slot (SCRATCH for idle rows)
    draws: FrameDraws

    def tensors(self) -> list[torch.Tensor]:
        draws = self.draws
        params = [getattr(p, name) for p in (draws.stop, draws.audio) for name in RowParams.BASE]
        return [self.hidden, self.slots, draws.uniforms, *params] + ([] if draws.seen is None else [draws.seen])

    def cloned(self) -> StepInputs:
        """Inputs of the same shapes in buffers of their own."""
        tensors = [t.clone() for t in self.tensors()]
        hidden, slots, uniforms = tensors[:3]
        base = len(RowParams.BASE)
        stop, audio = (RowParams(*tensors[3 + i * base : 3 + (i + 1) * base], facts=False) for i in (0, 1))
        seen = tensors[3 + 2 * base] if self.draws.seen is not None else None
        return StepInputs(hidden, slots, FrameDraws(uniforms, stop, audio, seen))

    def load(self, other: StepInputs) -> None:
        """Copy `other`'s values into these buffers."""
        for mine, theirs in zip(self.tensors(), other.tensors()):
            mine.copy_(theirs)


def whole_step(
    model: MossTTSLocal, pool: KVPool, inputs: StepInputs, width: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A block's decode step in one fixed shape, asking the host nothing: the frame (stop head and
    codebooks, drawn from the uniforms given), then every row's next position
    `[audio_assistant_slot, c_0..c_{n_vq-1}]` through the backbone over its pool slot, reading
    `width` keys (`BlockedDecode.fixed`) -> (stop [size] bool, codes [size, n_vq], next hidden [size, H]).
    A row's tokens are those of the eager step: the same draws from the same logits."""
    draws = inputs.draws
    draws = replace(draws, stop=draws.stop.without_facts(), audio=draws.audio.without_facts(), checks=None)
    stops, codes = draw_frame(model, inputs.hidden, draws.draw)
    cfg = model.cfg
    text = codes.new_full((codes.shape[0], 1), cfg.audio_assistant_slot_token_id)
    next_rows = torch.cat([text, codes], dim=1)[:, None]  # [size, 1, 1 + n_vq]
    attention = BlockedDecode.fixed(pool, inputs.slots, width)
    hidden = model.backbone(model.embed(next_rows), attention.positions[:, None], attention)[:, -1]
    attention.advance()
    return stops, codes, hidden
