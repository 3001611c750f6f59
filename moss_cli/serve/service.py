"""The one engine every HTTP request joins: it runs in a background thread over a live source of
arrivals (`engine.arrivals.Arrivals`), so a request that arrives mid-generation is admitted into
the running batch at the next step (continuous batching across requests). Each result goes back to
the request's own callbacks; the HTTP layer hands them to its event loop thread-safely."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import torch

from ..engine.arrivals import Arrivals
from ..io.audio import to_pcm16
from ..pipeline import Prepared, Synthesizer, SynthResult
from ..pipeline.environment import environment

log = logging.getLogger("moss.serve")


class Unavailable(RuntimeError):
    """The engine takes no more requests (the server is shutting down, or the engine failed)."""


@dataclass
class Ticket:
    """One request in the engine and whom to tell about it. Both callbacks run in the engine thread
    and must only hand over (never block)."""

    prepared: Prepared
    done: Callable[[SynthResult | BaseException], None]  # the result, or why there is none
    chunk: Callable[[bytes], None] | None = None  # streaming: each chunk's int16 PCM as it is decoded

    @property
    def key(self) -> str:
        return self.prepared.request.id


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


class Service:
    def __init__(self, synth: Synthesizer, *, max_batch: int | None = None) -> None:
        self.synth = synth
        self.max_batch = max_batch or synth.max_batch
        self._arrivals: Arrivals[Prepared] = Arrivals()
        self._tickets: dict[str, Ticket] = {}
        self._cancelled: set[str] = set()  # tickets whose client went away, until the engine drops them
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="moss-engine", daemon=True)
        self.failures = 0  # engine runs that ended in an error (their requests got a 500)
        self.cancellations = 0  # requests the engine dropped because their client went away
        self._environment: dict | None = None  # see environment()
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

    def submit(self, ticket: Ticket) -> None:
        """Join the running batch; raises Unavailable once the service is closing."""
        with self._lock:
            if not self.ready:
                raise Unavailable("the server is shutting down")
            self._tickets[ticket.key] = ticket
            self._arrivals.put(ticket.prepared)

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

    @property
    def in_flight(self) -> int:
        """Requests submitted and not yet answered (waiting or in the batch)."""
        return len(self._tickets)

    def cancel(self, key: str) -> None:
        """The client of `key` went away: the engine drops the request before its next step (or
        before admitting it), so it no longer holds a place in the batch. Its ticket still gets
        the outcome, a result marked cancelled (or the answer, if it finished first)."""
        with self._lock:
            if key in self._tickets:
                self._cancelled.add(key)

    def close(self, timeout: float | None = None) -> bool:
        """Take no more requests, let the engine finish the ones it has; True once it has."""
        with self._lock:
            self._arrivals.close()
        if self._thread.ident is not None:  # started
            self._thread.join(timeout)
        return not self._thread.is_alive()

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
        # run: a request sent to an idle server repeats itself, requests that overlap share the
        # stream (batch-dependent, the negative control); one endless run would make even a request
        # sent alone differ from its repeat.
        legacy = self.synth.options.legacy_global_rng
        # Every request is decoded chunk by chunk as it is generated (stream=True), whether its client
        # streams or not: one engine run serves both, and each request is decoded on its own. In the
        # batch-invariant mode the streamed PCM is bitwise the offline PCM of `moss synth`.
        while True:
            source = _Taken(self._arrivals, end_when_idle=legacy)
            try:
                results = self.synth.run(
                    source,
                    max_batch=self.max_batch,
                    stream=True,
                    sinks=self._sink,
                    cancelled=self._cancelled.__contains__,
                )
                for result in results:
                    source.taken.discard(result.request.id)
                    if result.cancelled:
                        self.cancellations += 1
                        log.info("request %s cancelled after %d frames (client gone)", result.request.id, result.frames)
                    self._finish(result.request.id, result)
            except Exception as error:  # one failed step must not end the server
                self.failures += 1
                log.exception("the engine failed; its %d running request(s) get an error", len(source.taken))
                for key in source.taken:
                    self._finish(key, error)
                continue
            if not source.idled:
                return  # closed, and every request answered

    def _finish(self, key: str, outcome: SynthResult | BaseException) -> None:
        with self._lock:
            ticket = self._tickets.pop(key, None)
            self._cancelled.discard(key)
        if ticket is None:
            return
        try:
            ticket.done(outcome)
        except Exception:  # a handler that went away must not take the engine with it
            log.exception("could not hand over the result of %s", key)

    def _sink(self, key: str) -> Callable[[torch.Tensor], None] | None:
        """Streaming requests get each decoded chunk as int16 PCM; the others only their result."""
        ticket = self._tickets.get(key)
        if ticket is None or ticket.chunk is None:
            return None
        send = ticket.chunk
        return lambda audio: send(to_pcm16(audio).tobytes())
