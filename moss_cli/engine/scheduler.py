"""Continuous batching: up to `max_batch` requests in flight, new ones join as others finish.

The requests admitted at a step are prefilled together (`prefill.py`), then decoded one frame
per step together with whatever else is in flight. Every request has its own slot in the engine's
KV pool and its own random generator, so what it produces does not depend on the order of the
input or on its neighbours' random draws.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator

import torch

from ..model.talker import MossTTSLocal
from ..numerics import INVARIANT
from ..numerics.layout import EngineLayout, Steps, grown
from ..sampling_params import HeadSampling
from .compiled import CompiledFrame
from .frame import sample_frame
from .frame_step import FrameStep
from .kv_cache import SCRATCH, BlockedDecode, KVPool
from .prefill import prefill
from .sampling import random_stream

# Called right before each draw with (request key, frame index, codebook, logits [V], rows in the
# batch, the row's generator or None for the global RNG); codebook -1 is the stop head. It may
# return replacement logits (a test hook for perturbations) or None. The audit records logits and
# random-stream states through it.
_END = object()  # the request source is exhausted

LogitsHook = Callable[[str, int, int, torch.Tensor, int, "torch.Generator | None"], "torch.Tensor | None"]


@dataclass
class GenerationRequest:
    """What the engine needs to know about one request; it knows nothing of files or ids' meaning."""

    key: str
    prompt: torch.Tensor  # [T, 1 + n_vq]
    max_new_frames: int
    audio: HeadSampling
    stop: HeadSampling
    rng: int | torch.Generator | None = None  # its random stream: a seed, a generator, or None (see `random_stream`)
    do_sample: bool = True
    arrival_step: int = 0  # the engine step from which it may be admitted (to model late arrivals)
    ignore_stop: bool = False  # run the stop head but never stop before max_new_frames (benchmarks)


@dataclass
class GenerationResult:
    key: str
    codes: torch.Tensor  # [frames, n_vq] on CPU
    stopped: bool  # True: the stop head ended it; False: the frame budget did
    batch_size_seen: int  # most requests in flight together while this one ran
    first_step: int
    last_step: int
    wall_s: float
    admitted_at: float = 0.0  # the engine clock's reading when the request was admitted
    cancelled: bool = False  # dropped on the caller's word (`cancelled`), with the frames made until then


@dataclass
class FrameEvent:
    """One frame a request produced (yielded while it runs, when the caller asks for frames)."""

    key: str
    codes: torch.Tensor  # [n_vq], on the engine's device


Event = GenerationResult | FrameEvent


@dataclass
class _Running:
    request: GenerationRequest
    slot: int  # where its keys and values live in the engine's KVPool
    generator: torch.Generator | None
    started: float
    first_step: int
    hidden: torch.Tensor | None = None  # backbone output for the next frame [H]
    frames: list[torch.Tensor] = field(default_factory=list)
    seen: torch.Tensor | None = None  # [n_vq, V] codes generated so far (for the repetition penalty)
    batch_size_seen: int = 1


class Engine:
    def __init__(
        self,
        model: MossTTSLocal,
        *,
        max_batch: int = 8,
        layout: EngineLayout | None = None,  # None: fixed here, batch-invariant (`EngineLayout.fix`)
        logits_hook: LogitsHook | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        if max_batch < 1:
            raise ValueError("max_batch must be at least 1")
        self.model = model
        self.max_batch = max_batch
        self.clock = clock  # one clock for admission and finish times (callers compare with it)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        self.steps = 0
        backbone = model.cfg.backbone
        self.pool = KVPool(backbone.num_layers, backbone.num_kv_heads, backbone.head_dim, self.device, self.dtype)
        # The layout is fixed once, here, or handed in (fixed on the thread that runs this engine; a
        # synthesizer's engines share one whatever their batch, so a request's bits do not depend on
        # the batch it runs in); a run's environment reads it. One padded block for the whole batch,
        # where verified invariant, is probed up to some rows and grown when a larger batch forms.
        self.layout = layout or EngineLayout.fix(model, INVARIANT, max_batch)
        if self.layout.compile and model.packed:
            raise ValueError("a model with packed weights cannot be compiled: load it with pack=False")
        self.decode = self.layout.steps  # the decode step's layout now (`grown`)
        # torch.compile of the frame (local transformer, heads, sampler): one graph per block shape.
        fixed = self.decode.kind is not Steps.UNPADDED
        compiled = None
        if self.layout.compile:
            compiled = CompiledFrame(sample_frame, fixed_shape=fixed, device_type=self.device.type)
        self.frame_step = FrameStep(model, logits_hook, compiled)

    @torch.inference_mode()
    def _admit(self, requests: list[GenerationRequest]) -> list[_Running]:
        """Slots, random streams and prefill for the requests admitted at this step (their prompts
        share forwards where the layout's `prefill` allows it)."""
        admitted = []
        for request in requests:
            slot = self.pool.allocate(request.prompt.shape[0] + request.max_new_frames)
            running = _Running(request, slot, random_stream(request.rng, self.device), self.clock(), self.steps)
            if request.audio.repetition_penalty != 1.0:
                running.seen = torch.zeros(
                    self.model.cfg.n_vq, self.model.cfg.audio_vocab_size, dtype=torch.bool, device=self.device
                )
            admitted.append(running)
        prompts = [r.request.prompt.to(self.device) for r in admitted]
        hidden = prefill(self.model, self.pool, prompts, [r.slot for r in admitted], self.layout.prefill)
        for running, h in zip(admitted, hidden):
            running.hidden = h
        return admitted

    def run(
        self,
        requests: Iterable[GenerationRequest | None],
        *,
        wait: Callable[[], None] | None = None,
        cancelled: Callable[[str], bool] | None = None,
    ) -> Iterator[GenerationResult]:
        """Yield each request's result as soon as it finishes."""
        events = self.events(requests, frames=False, wait=wait, cancelled=cancelled)
        return (event for event in events if isinstance(event, GenerationResult))

    def events(
        self,
        requests: Iterable[GenerationRequest | None],
        *,
        frames: bool = True,
        wait: Callable[[], None] | None = None,
        cancelled: Callable[[str], bool] | None = None,
    ) -> Iterator[Event]:
        """Like `run`, with a `FrameEvent` for every frame as it is produced (streaming consumers
        decode or send it; the engine itself knows nothing of codecs or files).

        A source of live arrivals (a server's `Arrivals`) yields None when nothing has arrived
        yet: the engine goes on decoding what it has and looks again after the step. When it has
        nothing to decode it calls `wait` (which blocks until the source may have more) first.

        `cancelled(key)` is asked before every step (and before admitting a request): a request it
        names leaves the batch at once, its slot freed, with a result marked `cancelled` (a server
        whose client went away). In batch-invariant mode the others' outputs do not change."""
        waiting = iter(requests)
        head = next(waiting, _END)  # the next request to admit, in input order
        running: list[_Running] = []
        while True:
            if head is None:  # nothing had arrived at the last look
                if not running and wait is not None:
                    wait()
                head = next(waiting, _END)
            if cancelled is not None:
                for r in [r for r in running if cancelled(r.request.key)]:
                    running.remove(r)
                    yield self._finish(r, stopped=False, cancelled=True)
            admitted: list[GenerationRequest] = []
            while head is not None and head is not _END and len(running) + len(admitted) < self.max_batch:
                if head.arrival_step > self.steps:
                    if running or admitted:
                        break  # not arrived yet: admitted at a later step
                    self.steps = head.arrival_step  # idle until it arrives
                request, head = head, next(waiting, _END)
                dropped = cancelled is not None and cancelled(request.key)
                if dropped or request.max_new_frames <= 0:
                    yield self._unrun(request, cancelled=dropped)
                    continue
                admitted.append(request)
            running.extend(self._admit(admitted))
            if not running:
                if head is _END:
                    return
                continue
            for r in running:
                r.batch_size_seen = max(r.batch_size_seen, len(running))
            yield from self._step(running, frames)
            self.steps += 1

    @torch.inference_mode()
    def _step(self, running: list[_Running], frames: bool) -> Iterator[Event]:
        """Decode one frame for every running request, then feed the continuing ones to the backbone.

        Batch-invariant mode pads the step (`numerics.layout.StepLayout`): to one block of a
        multiple of a small unit for the whole batch where this platform's products are verified to
        give a row the same bits at every such row count, else to blocks of exactly the fixed rows
        (GEMM libraries may round a row differently for other row counts; cuBLAS picks other
        kernels). In both modes each row attends over its own keys only (BlockedDecode) and draws
        from its own random stream (`FrameStep`); the fast mode just does not pad.
        """
        self.decode = grown(self.decode, self.model, self.layout.numerics, len(running), self.max_batch)
        blocks = [(running[start:end], size) for start, end, size in self.decode.blocks(len(running))]
        finished: set[int] = set()
        for rows, size in blocks:
            yield from self._step_block(rows, size, finished, frames)
        running[:] = [r for r in running if id(r) not in finished]

    def _step_block(self, rows: list[_Running], size: int, finished: set[int], frames: bool) -> Iterator[Event]:
        model, cfg = self.model, self.model.cfg
        n = len(rows)
        hidden = torch.stack([r.hidden for r in rows])
        if size > n:  # idle rows: zeros in, ignored out
            hidden = torch.cat([hidden, hidden.new_zeros(size - n, hidden.shape[1])])
        stops, codes = self.frame_step(rows, hidden, size)
        active = [True] * n  # rows still drawing in this frame
        for i, stop in enumerate(stops):
            if stop and not rows[i].request.ignore_stop:
                active[i] = False
                finished.add(id(rows[i]))
                yield self._finish(rows[i], stopped=True)
        if not any(active):
            return
        feed = []  # rows that go on: (block index, request)
        codebooks = torch.arange(cfg.n_vq, device=self.device)
        for i, r in enumerate(rows):
            if not active[i]:
                continue
            r.frames.append(codes[i])
            if r.seen is not None:
                r.seen[codebooks, codes[i]] = True
            if frames:
                yield FrameEvent(r.request.key, codes[i])
            if len(r.frames) >= r.request.max_new_frames:
                finished.add(id(r))
                yield self._finish(r, stopped=False)
            else:
                feed.append((i, r))
        if not feed:
            return
        source = [i for i, _ in feed]
        places, width = self.decode.places(source, size)
        at = torch.tensor(places, device=self.device)
        next_rows = torch.full((width, 1, cfg.n_vq + 1), cfg.audio_pad_code, dtype=torch.long, device=self.device)
        next_rows[:, 0, 0] = cfg.pad_token_id
        next_rows[at, 0, 0] = cfg.audio_assistant_slot_token_id
        next_rows[at, 0, 1:] = codes[torch.tensor(source, device=self.device)]
        slots = [SCRATCH] * width  # stopped and idle rows write to the scratch slot; their outputs are ignored
        for place, (_, r) in zip(places, feed):
            slots[place] = r.slot
        attention = BlockedDecode(self.pool, slots)
        positions = attention.positions[:, None]
        last = model.backbone(model.embed(next_rows), positions, attention)[:, -1]
        attention.advance(1)
        for place, (_, r) in zip(places, feed):
            r.hidden = last[place]

    def _finish(self, r: _Running, *, stopped: bool, cancelled: bool = False) -> GenerationResult:
        self.pool.release(r.slot)
        codes = torch.stack(r.frames).cpu() if r.frames else self._no_codes()
        return GenerationResult(
            r.request.key,
            codes,
            stopped,
            r.batch_size_seen,
            r.first_step,
            self.steps,
            self.clock() - r.started,
            r.started,
            cancelled,
        )

    def _unrun(self, request: GenerationRequest, *, cancelled: bool) -> GenerationResult:
        """The result of a request never admitted: no frames asked for, or cancelled while waiting."""
        now = self.clock()
        return GenerationResult(request.key, self._no_codes(), False, 1, self.steps, self.steps, 0.0, now, cancelled)

    def _no_codes(self) -> torch.Tensor:
        return torch.zeros(0, self.model.cfg.n_vq, dtype=torch.long)
