"""Requests in, decoded audio out: validated requests -> engine (talker) -> codec -> PCM. No files:
`moss synth` (moss_cli.jobs) writes what this yields, and the audit compares it."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from ..config.effective import Effective, SeedSource, effective, frame_budget
from ..config.requests import (
    DEFAULT_MAX_LINE_BYTES,
    Problem,
    Request,
    RequestFileError,
    max_line_bytes_for,
)
from ..engine.requests import FrameEvent, GenerationRequest, GenerationResult, LogitsHook
from ..engine.scheduler import Engine
from ..io.audio import pcm_sha256, to_pcm16
from ..io.outcome import Outcome
from ..io.reference_audio import Reference, ReferenceError
from ..model.prompt import max_token_bytes
from ..numerics.layout import EngineLayout
from .models import Models
from .options import SynthOptions
from .streaming import StreamingDecode, chunk_schedule
from .voices import Voices


@dataclass
class Prepared:
    """A validated request with everything the engine needs except its prompt tensor, which is
    built only when the engine admits it (so a long request file never holds every prompt)."""

    request: Request
    effective: Effective
    prompt_length: int
    max_new_frames: int
    arrival_step: int = 0
    reference: Reference | None = None


@dataclass
class SynthResult:
    request: Request
    effective: Effective
    codes: torch.Tensor  # [frames, n_vq]
    audio: torch.Tensor  # float32 [channels, samples]
    pcm: np.ndarray  # int16 [samples, channels], what the file stores
    stopped: bool
    batch_size_seen: int
    wall_s: float
    prompt_tokens: int
    admitted_at: float = 0.0  # engine clock at admission
    stream: StreamingDecode | None = None  # chunk sizes and timings when decoded while generating
    cancelled: bool = False  # left the engine on the caller's word: its codes so far, no audio decoded

    @property
    def time_to_first_audio(self) -> float | None:
        """Seconds from the request's admission to the delivery of its first audio chunk (streaming
        only); both readings come from the one clock the engine and the decoder share."""
        if self.stream is None or not self.stream.chunks:
            return None
        return self.stream.chunks[0].at_s - self.admitted_at

    @property
    def frames(self) -> int:
        return int(self.codes.shape[0])

    @property
    def stop_reason(self) -> str:
        """`stop` (the stop head ended it), `max_frames` (the frame budget did), `cancelled` (the caller
        dropped it) or `empty` (no audio)."""
        if self.cancelled:
            return "cancelled"
        if self.frames == 0:
            return "empty"
        return "stop" if self.stopped else "max_frames"

    def outcome(self, sample_rate: int, content: dict | None = None) -> Outcome:
        """What the request produced, for its manifest row and the audit (`content`: what shapes its
        codes, for the audit's mix-up check)."""
        eff = self.effective
        audio = eff.audio
        chunks = None if self.stream is None else self.stream.chunks
        return Outcome(
            id=self.request.id,
            text=self.request.text,
            pcm=self.pcm,
            sample_rate=sample_rate,
            pcm_sha256=pcm_sha256(self.pcm),
            seed=eff.seed,
            seed_source=eff.seed_source,
            frames=self.frames,
            codes=self.codes,
            audio=self.audio,
            batch_size_seen=self.batch_size_seen,
            wall_s=self.wall_s,
            stop_reason=self.stop_reason,
            sampling={
                "audio_temperature": audio.temperature if eff.do_sample else 0.0,
                "audio_top_p": audio.top_p,
                "audio_top_k": audio.top_k,
                "audio_repetition_penalty": audio.repetition_penalty,
            },
            prompt_tokens=self.prompt_tokens,
            ttfa_s=self.time_to_first_audio,
            chunks=None if chunks is None else [c.frames for c in chunks],
            chunk_ms=None if chunks is None else [c.decode_ms for c in chunks],
            content=content or {},
        )


Sinks = Callable[[str], Callable[[torch.Tensor], None]]  # request id -> receiver of its audio chunks


class Synthesizer(Models):
    """The models of a run and the way requests go through them."""

    def __init__(self, options: SynthOptions, *, clock: Callable[[], float] = time.perf_counter) -> None:
        super().__init__(options)
        self.clock = clock  # one clock for admission and chunk delivery times
        self.voices = Voices(self)
        self.max_batch = options.max_batch or self.deploy.max_num_seqs or 8
        self._layout: EngineLayout | None = None

    @functools.cached_property
    def token_bytes(self) -> int:
        """The most bytes of text one token stands for (a cheap lower bound on token counts)."""
        return max_token_bytes(self.prompts.tokenizer)

    @property
    def max_line_bytes(self) -> int:
        """The longest request line that could still fit max_model_len: longer ones are rejected
        unread, so an absurd line costs neither parsing nor tokenizing."""
        limit = self.deploy.max_model_len
        return max_line_bytes_for(limit, self.token_bytes) if limit is not None else DEFAULT_MAX_LINE_BYTES

    def min_prompt_tokens(self, request: Request) -> int:
        """Tokens the request's text needs at least, without tokenizing it."""
        text = (request.ref_text or "") + request.text
        normalizer = self.prompts.tokenizer.normalizer  # the tokenizer counts normalized text (NFC for Qwen)
        if normalizer is not None:
            text = normalizer.normalize_str(text)
        return -(-len(text.encode("utf-8")) // max(self.token_bytes, 1))

    @property
    def legacy_seed(self) -> int:
        """The one global seed a --legacy-global-rng run starts from."""
        return self.deploy.default_seed if self.deploy.default_seed is not None else 0

    @property
    def chunk_schedule(self) -> list[int]:
        """Streaming chunk sizes from the deploy's connector keys (the last one repeats)."""
        return chunk_schedule(self.deploy.codec_stream)

    def reference(self, path) -> Reference:
        return self.voices.reference(path)

    def prepare(self, requests: Iterable[Request], file=None, problems: Sequence[Problem] = ()) -> list[Prepared]:
        """Effective parameters and frame budgets; unusable references and prompts too long for
        max_model_len are errors, reported together with `problems` (those of the file's other
        lines, from `parse_requests`) in line order."""
        prepared, problems = [], list(problems)
        limit = self.deploy.max_model_len
        for request in requests:
            reference = None
            if request.ref_audio is not None:
                try:
                    reference = self.voices.reference(request.ref_audio)
                except ReferenceError as e:
                    problems.append(Problem(request.line, "ref_audio", str(e)))
                    continue
            if limit is not None and (least := self.min_prompt_tokens(request)) >= limit:
                problems.append(
                    Problem(
                        request.line,
                        "text",
                        f"the text needs at least {least} tokens, but max_model_len is {limit}: shorten it",
                    )
                )
                continue  # far too long: not worth tokenizing
            length = self.voices.prompt_length(request, reference)
            if limit is not None and length >= limit:
                what = "text and reference audio" if reference is not None else "text"
                problems.append(
                    Problem(
                        request.line,
                        "ref_audio" if reference is not None else "text",
                        f"the prompt is {length} tokens, but max_model_len is {limit}: shorten the {what}",
                    )
                )
                continue
            eff = effective(request, self.deploy)
            if self.options.legacy_global_rng:  # record what really drives the draws: the run's global stream
                eff = dataclasses.replace(eff, seed=self.legacy_seed, seed_source=SeedSource.GLOBAL)
            prepared.append(
                Prepared(request, eff, length, frame_budget(request, self.deploy, length), reference=reference)
            )
        if problems:
            raise RequestFileError(file or "<requests>", sorted(problems, key=lambda p: p.line or 0))
        return prepared

    def prompt(self, p: Prepared) -> torch.Tensor:
        return self.voices.prompt(p.request, p.reference)

    def generation(self, p: Prepared) -> GenerationRequest:
        eff = p.effective
        return GenerationRequest(
            key=p.request.id,
            prompt=self.prompt(p),
            max_new_frames=p.max_new_frames,
            audio=eff.audio,
            stop=eff.stop,
            # The legacy mode's "global" seed seeds the run's global stream (`run`), not a row's.
            rng=None if eff.seed_source == SeedSource.GLOBAL else eff.seed,
            do_sample=eff.do_sample,
            arrival_step=p.arrival_step,
        )

    @property
    def layout(self) -> EngineLayout:
        """The layout of every engine this synthesizer builds at its `max_batch` (what a run's
        environment records): fixed once, by the first engine or reader, on the calling thread. A
        server's engine thread fixes it before anything else (its thread count decides the probes)."""
        if self._layout is None:
            options = self.options
            self._layout = EngineLayout.fix(
                self.talker, options.numerics, self.max_batch, options.compile, options.graphs
            )
        return self._layout

    def engine(self, max_batch: int | None = None, logits_hook: LogitsHook | None = None) -> Engine:
        max_batch = max_batch or self.max_batch
        return Engine(
            self.talker,
            layout=self.layout,  # one layout for every batch, so a request's bits do not depend on it
            max_batch=max_batch,
            logits_hook=logits_hook,
            clock=self.clock,
        )

    def run(
        self,
        prepared: Iterable[Prepared | None],
        *,
        max_batch: int | None = None,
        logits_hook: LogitsHook | None = None,
        stream: bool = False,
        sinks: Sinks | None = None,
        cancelled: Callable[[str], bool] | None = None,
    ) -> Iterator[SynthResult]:
        """Synthesise in the given order; yield each request as soon as its audio is decoded.

        `stream` decodes each request chunk by chunk while it is generated (the deploy's chunk
        schedule); `sinks(id)` then gives a callable that receives each chunk's audio.
        `cancelled(id)` drops a request from the engine (see `Engine.events`); its result comes
        at once, with no audio decoded."""
        if self.options.legacy_global_rng:
            # Pre-fix behaviour: one global stream for every draw; seeded once per run, so a run
            # reproduces itself but not another batch composition.
            torch.manual_seed(self.legacy_seed)
        by_key: dict[str, Prepared] = {}

        def generations():
            for p in prepared:
                if p is None:  # a live source (engine.arrivals.Arrivals) with nothing waiting yet
                    yield None
                    continue
                by_key[p.request.id] = p
                yield self.generation(p)

        wait = getattr(prepared, "wait", None)  # live sources block the idle engine until an arrival

        engine = self.engine(max_batch, logits_hook)
        silence = torch.zeros(self.codec.channels, 0)
        if stream:
            events = engine.events(generations(), wait=wait, cancelled=cancelled)
            for result, decoder in self._streamed(events, sinks):
                audio = decoder.finish() if decoder and not result.cancelled else silence  # None: no frames at all
                yield self._result(by_key.pop(result.key), result, audio, decoder)
            return
        results = engine.run(generations(), wait=wait, cancelled=cancelled)
        # A live source never ends, so a group would wait for the next request to finish (forever
        # once the engine idles): decode each result at once (the same bits in batch-invariant mode).
        groups = self._decode_groups(results) if wait is None else ([result] for result in results)
        for group in groups:
            decoded = iter(self.decode_many([r.codes for r in group if not r.cancelled]))
            for result in group:
                audio = silence if result.cancelled else next(decoded)
                yield self._result(by_key.pop(result.key), result, audio, None)

    def _streamed(
        self, events: Iterator, sinks: Sinks | None
    ) -> Iterator[tuple[GenerationResult, StreamingDecode | None]]:
        """Decode each request's frames as the engine produces them, in the deploy's chunks."""
        decoders: dict[str, StreamingDecode] = {}
        for event in events:
            if isinstance(event, FrameEvent):
                if event.key not in decoders:
                    decoders[event.key] = StreamingDecode(
                        self.codec, self.chunk_schedule, sinks(event.key) if sinks else None, self.clock
                    )
                decoders[event.key].push(event.codes)
            else:
                yield event, decoders.pop(event.key, None)

    def _result(
        self, p: Prepared, result: GenerationResult, audio: torch.Tensor, decoder: StreamingDecode | None
    ) -> SynthResult:
        return SynthResult(
            p.request,
            p.effective,
            result.codes,
            audio,
            to_pcm16(audio),
            result.stopped,
            result.batch_size_seen,
            result.wall_s,
            p.prompt_length,
            result.admitted_at,
            decoder,
            result.cancelled,
        )

    @staticmethod
    def _decode_groups(results: Iterator[GenerationResult]) -> Iterator[list[GenerationResult]]:
        """Requests that finish in the same engine step are decoded together in one padded codec
        batch. In batch-invariant mode the codec computes in fixed tiles, so a waveform's bits do not
        depend on what it is decoded with; in the fast mode they do (as in a throughput-minded
        server)."""
        group: list[GenerationResult] = []
        for result in results:
            if group and result.last_step != group[-1].last_step:
                yield group
                group = []
            group.append(result)
        if group:
            yield group

    def decode(self, codes: torch.Tensor) -> torch.Tensor:
        """One request's codes [frames, n_vq] -> float audio [channels, samples], decoded on its own."""
        return self.decode_many([codes])[0]

    def decode_many(self, codes: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Decode several requests in one padded batch; each gets back exactly its own length."""
        lengths = [int(c.shape[0]) for c in codes]
        if max(lengths, default=0) == 0:
            return [torch.zeros(self.codec.channels, 0) for _ in codes]
        batch = torch.zeros(self.talker_config.n_vq, len(codes), max(lengths), dtype=torch.long)
        for i, c in enumerate(codes):
            batch[:, i, : lengths[i]] = c.T
        audio = self.codec.decode(batch.to(self.device)).cpu()
        hop = self.codec.cfg.downsample_rate
        return [audio[i, :, : lengths[i] * hop].contiguous() for i in range(len(codes))]
