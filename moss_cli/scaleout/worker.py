"""One Ray worker (an actor): a loaded talker + codec, kept for the whole run.

`synthesize` hands a request to the worker's own continuously batching engine (started on first
use, fed through `engine.arrivals.Arrivals`, the way `moss serve` feeds it) and returns when that
request is decoded, so one worker has many requests in flight and admits a new one as soon as
another finishes. `run` executes one whole engine run (an audit piece: a fixed list, max batch and
arrival steps) and `record` replays one for the audit's attribution. Workers write no files: the
driver writes every output, so a worker killed at any moment leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import torch

from ..audit.attribution import record_logits
from ..engine.arrivals import Arrivals
from ..io.atomic import atomic_path
from ..pipeline import Prepared, Synthesizer, SynthOptions, SynthResult
from ..pipeline.environment import environment
from ..pipeline.streaming import Chunk

# Environment of every worker process, set before it imports torch: idle OpenMP threads sleep
# instead of spinning against the other workers on the node (see moss_cli.threads).
WORKER_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
VOICES = Path(tempfile.gettempdir()) / "moss-voices"  # reference voices by content hash, one copy per node


@dataclass
class StreamRecord:
    """What the driver keeps of a streaming decode (its chunks), without the decoder and its codec."""

    chunks: list[Chunk]


class SynthWorker:
    def __init__(self, options: SynthOptions) -> None:
        # A load error is kept and raised by `ready`, which the driver calls before sending any work:
        # it then sees the original exception (a MossError stays one: exit 2 with its message).
        self.error: BaseException | None = None
        try:
            self.synth = Synthesizer(options)
            self.synth.load()
            self.info = {"pid": os.getpid(), "environment": environment(self.synth)}
        except Exception as e:  # noqa: BLE001 (any failure to load is the driver's to report)
            self.error = e
            return
        self.arrivals: Arrivals[Prepared] = Arrivals()
        self.waiting: dict[str, concurrent.futures.Future] = {}
        self.engine: threading.Thread | None = None
        self.failure: BaseException | None = None

    async def ready(self) -> dict:
        """The worker's process id and environment, once its models are loaded (or the load error)."""
        if self.error is not None:
            raise self.error
        return self.info

    async def synthesize(self, p: Prepared, voice: bytes | None = None) -> SynthResult:
        """One request through the worker's running engine; returns its result once decoded."""
        if self.failure is not None:
            raise self.failure
        if self.engine is None:
            self.engine = threading.Thread(target=self._serve, name="moss-engine", daemon=True)
            self.engine.start()
        p = self._localise(p, voice)
        future: concurrent.futures.Future = concurrent.futures.Future()
        self.waiting[p.request.id] = future
        self.arrivals.put(p)
        return await asyncio.wrap_future(future)

    async def run(self, prepared: list[Prepared], max_batch: int, stream: bool, hook, voices: dict) -> list:
        """One engine run of exactly these requests (an audit piece), with their audio."""
        prepared = await self._localise_all(prepared, voices)

        def work() -> list[SynthResult]:
            results = self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream)
            return [portable(r, keep_audio=True) for r in results]

        return await asyncio.get_running_loop().run_in_executor(None, work)

    async def record(
        self, prepared: list[Prepared], max_batch: int, stream: bool, key: str, last_frame: int, perturb, voices: dict
    ) -> dict:
        """Replay an engine run, recording `key`'s logits and random-stream state (audit attribution)."""
        prepared = await self._localise_all(prepared, voices)

        def replay(hook) -> None:
            for _ in self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream):
                pass

        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: record_logits(replay, key, last_frame, perturb)
        )

    def _serve(self) -> None:
        """The engine loop: runs until the actor ends, delivering each result to its waiting call."""
        try:
            for result in self.synth.run(self.arrivals):
                self.waiting.pop(result.request.id).set_result(portable(result, keep_audio=False))
        except BaseException as e:  # noqa: BLE001 (every waiting call, and every later one, gets the error)
            self.failure = e
            self.arrivals.close()  # a call arriving now fails at once instead of waiting forever
            for future in list(self.waiting.values()):
                future.set_exception(e)
            self.waiting.clear()

    async def _localise_all(self, prepared: list[Prepared], voices: dict) -> list[Prepared]:
        """`voices`: request id -> ObjectRef of its voice's bytes (refs inside a dict are not
        resolved by Ray before the call; awaiting one fetches it)."""
        return [self._localise(p, await voices[p.request.id] if p.request.id in voices else None) for p in prepared]

    def _localise(self, p: Prepared, voice: bytes | None) -> Prepared:
        """A reference voice's bytes come from the driver (no shared file system needed for them);
        they are stored once per content on the node, where every worker and later run finds them."""
        if p.reference is None or voice is None:
            return p
        path = VOICES / f"{p.reference.sha256}{p.reference.path.suffix}"
        if not path.exists():
            VOICES.mkdir(parents=True, exist_ok=True)
            with atomic_path(path) as tmp:  # another worker on the node may be reading it
                tmp.write_bytes(voice)
        return dataclasses.replace(p, reference=dataclasses.replace(p.reference, path=path))


def portable(result: SynthResult, keep_audio: bool) -> SynthResult:
    """A result as it travels to the driver: the streaming decoder (which holds the codec) becomes its
    chunk record, and the float audio is dropped unless the audit compares it (the PCM stays)."""
    stream = None if result.stream is None else StreamRecord(list(result.stream.chunks))
    audio = result.audio if keep_audio else torch.zeros(result.audio.shape[0], 0)
    return dataclasses.replace(result, stream=stream, audio=audio)
