"""One Ray worker (an actor): a loaded talker + codec, kept for the whole run.

`synthesize` hands a request to the worker's own continuously batching engine (a
`pipeline.live.LiveEngine`, as `moss serve` runs one) and returns when that request is decoded, so
one worker has many requests in flight and admits a new one as soon as another finishes. `run`
executes one whole engine run (an audit piece: a fixed list, max batch and arrival steps) and
`replay` runs one again under the audit's recorder. Workers write no files: the
driver writes every output, so a worker killed at any moment leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from ..io.atomic import atomic_path
from ..pipeline import Prepared, Synthesizer, SynthOptions, SynthResult
from ..pipeline.live import LiveEngine
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
            self.engine = LiveEngine(self.synth)
            self.engine.start()  # loads, and fixes the layout on the engine's thread
            self.info = {"pid": os.getpid(), "environment": self.engine.environment()}
        except Exception as e:  # noqa: BLE001 (any failure to load is the driver's to report)
            self.error = e

    async def ready(self) -> dict:
        """The worker's process id and environment, once its models are loaded (or the load error)."""
        if self.error is not None:
            raise self.error
        return self.info

    async def synthesize(self, p: Prepared, voice: bytes | None = None) -> SynthResult:
        """One request through the worker's running engine; returns its result once decoded."""
        result = await asyncio.wrap_future(self.engine.submit(self._localise(p, voice)))
        return portable(result, keep_audio=False)

    async def run(self, prepared: list[Prepared], max_batch: int, stream: bool, hook, voices: dict) -> list:
        """One engine run of exactly these requests (an audit piece), with their audio."""
        prepared = await self._localise_all(prepared, voices)

        def work() -> list[SynthResult]:
            results = self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream)
            return [portable(r, keep_audio=True) for r in results]

        return await asyncio.get_running_loop().run_in_executor(None, work)

    async def replay(self, prepared: list[Prepared], max_batch: int, stream: bool, voices: dict, recorder) -> object:
        """Replay an engine run under `recorder`, which gets a function that runs it with a logits
        hook (the audit's attribution records a request's logits and random-stream state)."""
        prepared = await self._localise_all(prepared, voices)

        def run(hook) -> None:
            for _ in self.synth.run(prepared, max_batch=max_batch, logits_hook=hook, stream=stream):
                pass

        return await asyncio.get_running_loop().run_in_executor(None, lambda: recorder(run))

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
