"""Continuous batching: up to `max_batch` requests in flight, new ones join as others finish.

The requests admitted at a step are prefilled together (`prefill.py`), then decoded one frame
per step together with whatever else is in flight; one step is read top-down in `step.py`. Every
request has its own slot in the engine's KV pool and its own random generator, so what it
produces does not depend on the order of the input or on its neighbours' random draws.
"""

from __future__ import annotations

import time
from contextlib import closing
from typing import Callable, Iterable, Iterator

from ..model.talker import MossTTSLocal
from ..numerics import INVARIANT
from ..numerics.layout import EngineLayout
from .kv_cache import KVPool
from .requests import Event, GenerationRequest, GenerationResult, LogitsHook
from .runners import runner_for
from .step import DecodeStep, Row, Waiting


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
        # The layout is fixed once, here, or handed in (fixed on the thread that runs this engine; a
        # synthesizer's engines share one whatever their batch, so a request's bits do not depend on
        # the batch it runs in); a run's environment reads it.
        self.layout = layout or EngineLayout.fix(model, INVARIANT, max_batch)
        self.pool = self._pool()
        if self.layout.compile and model.packed:
            raise ValueError("a model with packed weights cannot be compiled: load it with pack=False")
        # The step runner is chosen here, once: eager, the compiled frame or the whole step's graph.
        runner = runner_for(model, self.pool, self.layout, logits_hook)
        # One clock for admission and finish times (callers compare with it).
        self.step = DecodeStep(model, self.layout, max_batch, runner, clock)

    def _pool(self) -> KVPool:
        """The KV pool: with --graphs, one an ended engine gave back (its step graphs replay over it)."""
        param = next(self.model.parameters())
        backbone = self.model.cfg.backbone
        shape = (backbone.num_layers, backbone.num_kv_heads, backbone.head_dim, param.device, param.dtype)
        if not self.layout.graphs:
            return KVPool(*shape)
        pool = KVPool.lent(*shape)
        pool.reserve(self.max_batch)
        return pool

    def run(
        self,
        requests: Iterable[GenerationRequest | None],
        *,
        wait: Callable[[], None] | None = None,
        cancelled: Callable[[str], bool] | None = None,
    ) -> Iterator[GenerationResult]:
        """Yield each request's result as soon as it finishes."""
        with closing(self.events(requests, frames=False, wait=wait, cancelled=cancelled)) as events:
            for event in events:
                if isinstance(event, GenerationResult):
                    yield event

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
        waiting = Waiting(requests)
        running: list[Row] = []
        if self.step.pool is not self.pool:  # an earlier run of this engine gave its pool back
            self.pool = self.step.pool = self._pool()
        try:
            while True:
                if waiting.head is None:  # nothing had arrived at the last look
                    if not running and wait is not None:
                        wait()
                    waiting.look()
                yield from self.step(waiting, running, frames=frames, cancelled=cancelled)
                if not running and waiting.ended:
                    return
        finally:
            if self.pool.few_shapes:  # the next engine's graphs replay over it
                self.pool.give_back()
                self.step.pool = None
