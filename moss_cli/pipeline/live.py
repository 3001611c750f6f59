"""One engine kept running in a background thread over a live source of arrivals
(`engine.arrivals.Arrivals`): a request submitted while others generate joins the running batch at
the next step (continuous batching). `submit` gives a future of the request's result; `cancel`
drops a request whose caller went away; `close` lets the engine finish and stops it. `moss serve`
and each Ray worker run their engine this way."""

from __future__ import annotations

import concurrent.futures
import logging
import threading
from typing import Callable, Iterator

import torch

from ..engine.arrivals import Arrivals
from .environment import environment
from .synthesizer import Prepared, Synthesizer, SynthResult

log = logging.getLogger("moss.engine")

Chunk = Callable[[torch.Tensor], None]  # a streaming request's decoded audio, chunk by chunk


class Unavailable(RuntimeError):
    """The engine takes no more requests (it is closing, or its thread has ended), or not now
    (`retry_after_s`: its queue is full)."""

    def __init__(self, message: str, retry_after_s: int | None = None) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class _Taken:
    """The arrivals as one engine run reads them. It remembers which requests the engine has taken
    (if the engine fails, those fail with it; the ones still waiting go to the next run) and, with
    `end_when_idle`, ends the run when the engine goes idle, so the next busy period is a new run."""

    def __init__(self, arrivals: Arrivals[Prepared], *, end_when_idle: bool = False) -> None:
        self.arrivals = arrivals
        self.end_when_idle = end_when_idle
        self.idled = False  # the run ended because the engine went idle (not because arrivals closed)
        self.taken: set[str] = set()

    def wait(self) -> None:  # Synthesizer.run calls it when the engine has nothing to do
        self.arrivals.wait()
        self.idled = self.end_when_idle

    def __iter__(self) -> Iterator[Prepared | None]:
        for item in self.arrivals:
            if item is not None:
                self.taken.add(item.request.id)
            yield item
            if self.idled:  # checked before taking the next arrival, which stays for the next run
                return


class LiveEngine:
    """`stream=True` decodes every request chunk by chunk while it is generated (a request submitted
    with `on_chunk` gets each chunk); in batch-invariant mode that audio is bitwise the offline one,
    so one engine serves streaming and non-streaming callers alike."""

    def __init__(
        self, synth: Synthesizer, *, max_batch: int | None = None, stream: bool = False, max_queue: int | None = None
    ) -> None:
        self.synth = synth
        self.max_batch = max_batch or synth.max_batch
        self.stream = stream
        self.max_queue = max_queue  # requests waiting for a place in the batch, at most (None: no bound)
        self._arrivals: Arrivals[Prepared] = Arrivals()
        self._futures: dict[str, concurrent.futures.Future] = {}
        self._chunks: dict[str, Chunk] = {}
        self._cancelled: set[str] = set()  # requests whose caller went away, until the engine drops them
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="moss-engine", daemon=True)
        self.failures = 0  # engine runs that ended in an error (their requests got it)
        self.cancellations = 0  # requests the engine dropped because their caller went away
        self._environment: dict | None = None
        self._laid_out = threading.Event()  # the engine thread has fixed the engine's layout
        self._layout_error: BaseException | None = None

    def start(self) -> None:
        """Load the models and start the engine thread; returns once it has fixed the engine's
        layout (raising what stopped it)."""
        self.synth.load()
        self._thread.start()
        self._laid_out.wait()
        if self._layout_error is not None:
            raise self._layout_error

    @property
    def ready(self) -> bool:
        return self._thread.is_alive() and not self._arrivals.closed

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered (waiting or in the batch)."""
        return len(self._futures)

    def submit(self, prepared: Prepared, on_chunk: Chunk | None = None) -> concurrent.futures.Future:
        """Join the running batch: a future of the request's result (or of the error that ended its
        engine run). Raises Unavailable once the engine is closing. `on_chunk` runs in the engine
        thread and must only hand over, never block."""
        future: concurrent.futures.Future = concurrent.futures.Future()
        with self._lock:
            if not self.ready:
                raise Unavailable(
                    "the engine is shutting down" if self._arrivals.closed else "the engine is not running"
                )
            # Counted over everything submitted (running or waiting): the engine takes the next
            # arrival out of `_arrivals` before it has a place for it, so counting the arrivals
            # alone let max_queue + 1 requests wait.
            if self.max_queue is not None and len(self._futures) >= self.max_batch + self.max_queue:
                raise Unavailable(f"{self.max_queue} requests are already waiting (--max-queue)", retry_after_s=1)
            key = prepared.request.id
            self._futures[key] = future
            if on_chunk is not None:
                self._chunks[key] = on_chunk
            self._arrivals.put(prepared)
        return future

    def cancel(self, key: str) -> None:
        """The caller of `key` went away: the engine drops the request before its next step (or
        before admitting it), so it holds no place in the batch. Its future still gets the outcome,
        a result marked cancelled (or the answer, if it finished first)."""
        with self._lock:
            if key in self._futures:
                self._cancelled.add(key)

    def close(self, timeout: float | None = None) -> bool:
        """Take no more requests, let the engine finish the ones it has; True once it has."""
        with self._lock:
            self._arrivals.close()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        return not self._thread.is_alive()

    def environment(self) -> dict:
        """What the engine computes with, as a local run records it (`.moss/environment.json`):
        torch, device, dtype, threads, checkpoint fingerprints, deploy hash, and the layout the
        engine thread fixed as it started (read, not probed again on the asking thread). Computed on
        first use (fingerprinting a real checkpoint reads up to a gigabyte), then kept."""
        if self._environment is None:
            recorded = environment(self.synth)
            recorded["threads"] = self.synth.threads  # the engine thread's, whichever thread asks
            self._environment = recorded
        return self._environment

    def _loop(self) -> None:
        # The engine thread's own torch settings: the thread count decides reduction order, so it
        # must be the one a local `moss synth` of the same model uses.
        torch.set_num_threads(self.synth.threads)
        try:  # the layout every run of this engine uses, probed under this thread's count
            self.synth.layout
        except BaseException as error:
            self._layout_error = error
            return
        finally:
            self._laid_out.set()
        # --legacy-global-rng seeds the one global stream at the start of a run. A busy period is a
        # run: a request sent to an idle engine repeats itself, requests that overlap share the
        # stream (batch-dependent, the negative control); one endless run would make even a request
        # sent alone differ from its repeat.
        legacy = self.synth.options.legacy_global_rng
        while True:
            source = _Taken(self._arrivals, end_when_idle=legacy)
            try:
                results = self.synth.run(
                    source,
                    max_batch=self.max_batch,
                    stream=self.stream,
                    sinks=self._chunks.get if self.stream else None,
                    cancelled=self._cancelled.__contains__,
                )
                for result in results:
                    source.taken.discard(result.request.id)
                    if result.cancelled:
                        self.cancellations += 1
                        log.info("request %s cancelled after %d frames (caller gone)", result.request.id, result.frames)
                    self._finish(result.request.id, result)
            except Exception as error:  # one failed run must not end the engine
                self.failures += 1
                log.exception("the engine failed; its %d running request(s) get an error", len(source.taken))
                for key in source.taken:
                    self._finish(key, error)
                continue
            if not source.idled:
                return  # closed, and every request answered

    def _finish(self, key: str, outcome: SynthResult | BaseException) -> None:
        with self._lock:
            future = self._futures.pop(key, None)
            self._chunks.pop(key, None)
            self._cancelled.discard(key)
        if future is None:
            return
        try:
            if isinstance(outcome, BaseException):
                future.set_exception(outcome)
            else:
                future.set_result(outcome)
        except Exception:  # a callback of a caller that went away must not take the engine with it
            log.exception("could not hand over the result of %s", key)
