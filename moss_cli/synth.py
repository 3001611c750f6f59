"""Batch synthesis: requests -> engine (talker) -> codec -> PCM -> audio files + manifest.

`Synthesizer` holds the loaded models and the resolved deploy config and runs any list of
requests through the continuous-batching engine; the audit drives it exactly as `moss synth`
does. `synthesize` adds the outputs (audio files and manifest).
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import numpy as np
import torch

from .api import Talker, load_codec, load_talker, read_codec_config, read_talker_config
from .assets import TINY_CODEC, TINY_DEPLOY, TINY_TALKER
from .config.deploy import DeployConfig, load_deploy
from .config.effective import Effective, effective, frame_budget
from .config.requests import (
    DEFAULT_MAX_LINE_BYTES,
    Problem,
    Request,
    RequestFileError,
    max_line_bytes_for,
    read_requests,
)
from .device import resolve_device, resolve_dtype
from .engine.chunks import StreamingDecode, chunk_schedule
from .engine.scheduler import (
    ROW_BLOCK,
    Engine,
    GenerationRequest,
    GenerationResult,
    LogitsHook,
)
from .errors import MossError
from .io.audio import (
    FORMATS,
    ProgressiveAudio,
    codes_sha256,
    pcm_sha256,
    to_pcm16,
    write_audio,
)
from .io.manifest import write_manifest
from .io.reference_audio import Reference, ReferenceError, read_reference
from .io.resume import (
    Journal,
    fingerprint,
    orphan_files,
    plan_resume,
    remove_stale_temporaries,
)
from .model.checkpoint import checkpoint_dir, checkpoint_fingerprint, load_tokenizer
from .model.codec import ROW_TILE, AudioCodec
from .model.prompt import PromptBuilder, max_token_bytes
from .threads import apply_threads

STOP_REASONS = ("stop", "max_frames", "empty")


@dataclass
class SynthOptions:
    deploy: Path | None = None
    model: Path | None = None
    codec: Path | None = None
    device: str = "auto"
    dtype: str = "auto"
    max_batch: int | None = None
    legacy_global_rng: bool = False
    batch_invariant: bool = True
    row_block: int = ROW_BLOCK
    threads: int | None = None  # torch CPU threads; None: chosen from the model's size (moss_cli.threads)
    allow_foreign_deploy: bool = False


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
        """`stop` (the stop head ended it), `max_frames` (the frame budget did) or `empty` (no audio)."""
        if self.frames == 0:
            return "empty"
        return "stop" if self.stopped else "max_frames"


def platform_name(device: torch.device) -> str:
    if device.type == "cuda" and getattr(torch.version, "hip", None):
        return "rocm"
    return device.type


class Synthesizer:
    """Deploy config, talker and codec. Configs and the tokenizer are read at construction (enough
    to validate every request); the weights load on first use."""

    def __init__(self, options: SynthOptions, *, clock: Callable[[], float] = time.perf_counter) -> None:
        if (options.model is None) != (options.codec is None):
            raise MossError("--model and --codec go together (a talker needs its audio tokenizer)", field="--codec")
        self.options = options
        self.device = resolve_device(options.device)
        self.dtype = resolve_dtype(options.dtype, self.device)
        deploy_path = options.deploy if options.deploy is not None else (TINY_DEPLOY if options.model is None else None)
        self.deploy: DeployConfig = load_deploy(deploy_path, platform_name(self.device),
                                                  allow_foreign=options.allow_foreign_deploy)
        self.talker_path = Path(options.model or TINY_TALKER)
        self.codec_path = Path(options.codec or TINY_CODEC)
        self.talker_config = read_talker_config(self.talker_path)
        self.codec_config = read_codec_config(self.codec_path)
        self._check_pairing()
        self.threads = apply_threads(options.threads, self.talker_config)
        self.clock = clock
        self.prompts = PromptBuilder(load_tokenizer(checkpoint_dir(self.talker_path),
                                                    self.talker_config.special_token_ids), self.talker_config)
        self.max_batch = options.max_batch or self.deploy.max_num_seqs or 8
        self._talker: Talker | None = None
        self._codec: AudioCodec | None = None
        self._references: dict[Path, Reference] = {}
        self._reference_codes: dict[str, torch.Tensor] = {}  # by file content hash: encode once

    @property
    def talker(self) -> Talker:
        if self._talker is None:
            self._talker = load_talker(self.talker_path, device=self.device, dtype=self.dtype)
        return self._talker

    @property
    def codec(self) -> AudioCodec:
        if self._codec is None:
            dtype = self.dtype if self.dtype != torch.float64 or self.device.type == "cpu" else torch.float32
            self._codec = load_codec(self.codec_path, device=self.device, dtype=dtype)
            # Fixed tiles make a request's waveform independent of what it is decoded with, and
            # chunked (streaming) decode bitwise equal to decoding the whole sequence.
            self._codec.row_block = ROW_TILE if self.options.batch_invariant else None
        return self._codec

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

    def load(self) -> None:
        """Load both models now (errors in the weights surface here, before any output is written)."""
        _ = self.talker, self.codec

    def _check_pairing(self) -> None:
        cfg, codec = self.talker_config, self.codec_config
        if codec.quantizer.num_quantizers < cfg.n_vq:
            raise MossError(f"the codec has {codec.quantizer.num_quantizers} quantizers but the talker generates "
                            f"{cfg.n_vq} codebooks per frame", file=self.codec_path, field="quantizer_kwargs")
        if max(cfg.audio_codebook_sizes) > codec.quantizer.codebook_size:
            raise MossError(f"the talker's audio vocab ({max(cfg.audio_codebook_sizes)}) exceeds the codec's "
                            f"codebook size ({codec.quantizer.codebook_size})", file=self.codec_path,
                            field="quantizer_kwargs")
        if cfg.sampling_rate != codec.sampling_rate:
            raise MossError(f"the talker expects {cfg.sampling_rate} Hz audio but the codec produces "
                            f"{codec.sampling_rate} Hz", file=self.codec_path, field="sampling_rate")

    def reference(self, path: Path) -> Reference:
        """A reference voice at the codec's rate and channels (read once per path)."""
        key = path.resolve()
        if key not in self._references:
            self._references[key] = read_reference(key, self.codec_config.channels, self.codec_config.sampling_rate)
        return self._references[key]

    def reference_codes(self, ref: Reference) -> torch.Tensor:
        """[frames, n_vq] codes of a reference voice; identical files are encoded once per run."""
        if ref.sha256 not in self._reference_codes:
            codes, lengths = self.codec.encode(ref.audio()[None].to(self.device), self.talker_config.n_vq)
            self._reference_codes[ref.sha256] = codes[:, 0, : int(lengths[0])].T.cpu()
        return self._reference_codes[ref.sha256]

    def prompt_length(self, request: Request, reference: Reference | None = None) -> int:
        if reference is None:
            return self.prompts.length(request.text, **request.prompt_fields)
        frames = reference.samples // self.codec_config.downsample_rate
        if request.ref_text is not None:  # continuation: transcript + text, the voice as prefix audio
            return self.prompts.length(request.ref_text + request.text, continuation_frames=frames,
                                       **request.prompt_fields)
        return self.prompts.length(request.text, reference_frames=frames, **request.prompt_fields)

    def prepare(self, requests: Iterable[Request], file: Path | None = None) -> list[Prepared]:
        """Effective parameters and frame budgets; unusable references and prompts too long for
        max_model_len are errors (all reported together)."""
        prepared, problems = [], []
        limit = self.deploy.max_model_len
        for request in requests:
            reference = None
            if request.ref_audio is not None:
                try:
                    reference = self.reference(request.ref_audio)
                except ReferenceError as e:
                    problems.append(Problem(request.line, "ref_audio", str(e)))
                    continue
            if limit is not None and (least := self.min_prompt_tokens(request)) >= limit:
                problems.append(Problem(request.line, "text", f"the text needs at least {least} tokens, but "
                                        f"max_model_len is {limit}: shorten it"))
                continue  # far too long: not worth tokenizing
            length = self.prompt_length(request, reference)
            if limit is not None and length >= limit:
                what = "text and reference audio" if reference is not None else "text"
                problems.append(Problem(request.line, "ref_audio" if reference is not None else "text",
                                        f"the prompt is {length} tokens, but max_model_len is {limit}: shorten the "
                                        f"{what}"))
                continue
            eff = effective(request, self.deploy)
            if self.options.legacy_global_rng:  # record what really drives the draws: the run's global stream
                eff = dataclasses.replace(eff, seed=self.legacy_seed, seed_source="global")
            prepared.append(Prepared(request, eff, length, frame_budget(request, self.deploy, length),
                                     reference=reference))
        if problems:
            raise RequestFileError(file or Path("<requests>"), problems)
        return prepared

    def prompt(self, p: Prepared) -> torch.Tensor:
        request = p.request
        if p.reference is None:
            return self.prompts.build(request.text, **request.prompt_fields)
        codes = self.reference_codes(p.reference)
        if request.ref_text is not None:
            return self.prompts.build(request.ref_text + request.text, continuation=codes, **request.prompt_fields)
        return self.prompts.build(request.text, references=[codes], **request.prompt_fields)

    def generation(self, p: Prepared) -> GenerationRequest:
        prompt = self.prompt(p)
        eff = p.effective
        return GenerationRequest(key=p.request.id, prompt=prompt, max_new_frames=p.max_new_frames, audio=eff.audio,
                                 stop=eff.stop, seed=eff.seed, do_sample=eff.do_sample, arrival_step=p.arrival_step)

    def run(self, prepared: Iterable[Prepared], *, max_batch: int | None = None,
            logits_hook: LogitsHook | None = None, stream: bool = False,
            sinks: Callable[[str], Callable[[torch.Tensor], None]] | None = None) -> Iterator[SynthResult]:
        """Synthesise in the given order; yield each request as soon as its audio is decoded.

        `stream` decodes each request chunk by chunk while it is generated (the deploy's chunk
        schedule); `sinks(id)` then gives a callable that receives each chunk's audio."""
        if self.options.legacy_global_rng:
            # Pre-fix behaviour: one global stream for every draw; seeded once per run, so a run
            # reproduces itself but not another batch composition.
            torch.manual_seed(self.legacy_seed)
        by_key: dict[str, Prepared] = {}
        decoders: dict[str, StreamingDecode] = {}

        def generations():
            for p in prepared:
                by_key[p.request.id] = p
                yield self.generation(p)

        def on_frame(key: str, frame: torch.Tensor) -> None:
            if key not in decoders:
                decoders[key] = StreamingDecode(self.codec, self.chunk_schedule, sinks(key) if sinks else None,
                                                self.clock)
            decoders[key].push(frame)

        engine = Engine(self.talker.model, max_batch=max_batch or self.max_batch,
                        legacy_global_rng=self.options.legacy_global_rng,
                        batch_invariant=self.options.batch_invariant, row_block=self.options.row_block,
                        logits_hook=logits_hook, on_frame=on_frame if stream else None, clock=self.clock)
        results = engine.run(generations())
        if stream:
            for result in results:
                decoder = decoders.pop(result.key, None)
                audio = decoder.finish() if decoder else torch.zeros(self.codec.channels, 0)
                yield self._result(by_key.pop(result.key), result, audio, decoder)
            return
        for group in self._decode_groups(results):
            for result, audio in zip(group, self.decode_many([r.codes for r in group])):
                yield self._result(by_key.pop(result.key), result, audio, None)

    def _result(self, p: Prepared, result: GenerationResult, audio: torch.Tensor,
                decoder: StreamingDecode | None) -> SynthResult:
        return SynthResult(p.request, p.effective, result.codes, audio, to_pcm16(audio), result.stopped,
                           result.batch_size_seen, result.wall_s, p.prompt_length, result.admitted_at, decoder)

    def _decode_groups(self, results: Iterator[GenerationResult]) -> Iterator[list[GenerationResult]]:
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
        if max(lengths) == 0:
            return [torch.zeros(self.codec.channels, 0) for _ in codes]
        batch = torch.zeros(self.talker_config.n_vq, len(codes), max(lengths), dtype=torch.long)
        for i, c in enumerate(codes):
            batch[:, i, : lengths[i]] = c.T
        audio = self.codec.decode(batch.to(self.device)).cpu()
        hop = self.codec.cfg.downsample_rate
        return [audio[i, :, : lengths[i] * hop].contiguous() for i in range(len(codes))]


@dataclass
class SynthSummary:
    requests: int
    audio_s: float
    wall_s: float
    out: Path
    manifest: Path | None
    rows: list[dict] = field(default_factory=list)
    resumed: int = 0  # requests already done by an earlier run of the same command
    dry_run: bool = False
    frame_budget: int = 0
    seed_sources: dict[str, int] = field(default_factory=dict)
    frame_rate: float = 12.5
    orphans: list[str] = field(default_factory=list)  # audio files in --out that no request of this run owns
    threads: int = 1

    @property
    def empty(self) -> list[str]:
        """Ids whose result has no audio at all (the stop head fired at the first frame)."""
        return [row["id"] for row in self.rows if row.get("stop_reason") == "empty"]

    @property
    def stop_reasons(self) -> dict[str, int]:
        counts = {reason: 0 for reason in STOP_REASONS}
        for row in self.rows:
            if row.get("stop_reason") in counts:
                counts[row["stop_reason"]] += 1
        return counts

    @property
    def real_time_factor(self) -> float:
        """Wall seconds per audio second (below 1 is faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else float("nan")

    def as_dict(self) -> dict:
        return {"requests": self.requests, "resumed": self.resumed, "dry_run": self.dry_run,
                "audio_s": round(self.audio_s, 3), "wall_s": round(self.wall_s, 3),
                "real_time_factor": None if self.real_time_factor != self.real_time_factor
                else round(self.real_time_factor, 4),
                "frame_budget": self.frame_budget, "seed_sources": self.seed_sources,
                "stop_reasons": self.stop_reasons, "empty": self.empty, "orphans": self.orphans,
                "threads": self.threads, "out": str(self.out),
                "manifest": str(self.manifest) if self.manifest else None}


def manifest_row(result: SynthResult, sample_rate: int, channels: int, file: str) -> dict:
    eff = result.effective
    return {
        "id": result.request.id, "text": result.request.text, "seed": eff.seed, "seed_source": eff.seed_source,
        "frames": result.frames, "duration_s": round(result.pcm.shape[0] / sample_rate, 6),
        "sample_rate": sample_rate, "channels": channels, "codes_sha256": codes_sha256(result.codes),
        "pcm_sha256": pcm_sha256(result.pcm), "batch_size_seen": result.batch_size_seen,
        "wall_s": round(result.wall_s, 4), "file": file, "stopped": result.stopped, "stop_reason": result.stop_reason,
        "temperature": eff.audio.temperature if eff.do_sample else 0.0, "top_p": eff.audio.top_p,
        "top_k": eff.audio.top_k, "repetition_penalty": eff.audio.repetition_penalty,
        "prompt_tokens": result.prompt_tokens,
        "ttfa_s": None if result.time_to_first_audio is None else round(result.time_to_first_audio, 4),
        "chunks": None if result.stream is None else " ".join(str(c.frames) for c in result.stream.chunks),
        "chunk_ms": None if result.stream is None else " ".join(f"{c.decode_ms:.1f}" for c in result.stream.chunks),
    }


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM; `signum` gives the exit code 128 + signum."""

    def __init__(self, signum: int = signal.SIGINT) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


@contextmanager
def interrupts_as_exceptions():
    """SIGTERM (and SIGINT) raise `Interrupted`, so the run stops through the normal cleanup path."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        raise Interrupted(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def request_fingerprint(p: Prepared, synth: Synthesizer, audio_format: str, checkpoints: dict) -> str:
    eff = p.effective
    return fingerprint({
        "text": p.request.text, "fields": p.request.prompt_fields, "seed": eff.seed, "seed_source": eff.seed_source,
        "audio": eff.audio.__dict__, "stop": eff.stop.__dict__, "do_sample": eff.do_sample,
        "max_new_frames": p.max_new_frames, "format": audio_format, "checkpoints": checkpoints,
        "ref_audio": p.reference.sha256 if p.reference else None, "ref_text": p.request.ref_text,
        "batch_invariant": synth.options.batch_invariant, "row_block": synth.options.row_block,
        "legacy_global_rng": synth.options.legacy_global_rng, "dtype": str(synth.dtype),
        "codec_row_tile": ROW_TILE if synth.options.batch_invariant else None,
    })


def synthesize(requests_path: Path, out: Path, options: SynthOptions, *, audio_format: str = "wav",
               dry_run: bool = False, force: bool = False, stream: bool = False,
               on_start: Callable[[int, int], None] | None = None,
               on_result: Callable[[SynthResult], None] | None = None) -> SynthSummary:
    """Validate everything, then synthesise into `out` (audio files + manifest.csv), resuming a
    previous run of the same command. `dry_run` stops after validation and writes nothing."""
    if audio_format not in FORMATS:
        raise MossError(f"unknown audio format {audio_format!r}; expected wav or flac", field="--format")
    if out.exists() and not out.is_dir():
        raise MossError("output path exists and is not a directory", file=out, field="--out")
    synth = Synthesizer(options)  # configs and tokenizer only: enough to bound and check the requests
    requests = read_requests(requests_path, max_line_bytes=synth.max_line_bytes)  # before any weights load
    prepared = synth.prepare(requests, requests_path)
    names = {p.request.id: f"{p.request.id}.{audio_format}" for p in prepared}
    for rid, name in names.items():  # ids are validated as plain names; this keeps it that way
        if (out / name).resolve().parent != out.resolve():
            raise MossError(f"id {rid!r} would write outside the output directory", file=requests_path, field="id")
    sources: dict[str, int] = {}
    for p in prepared:
        sources[p.effective.seed_source] = sources.get(p.effective.seed_source, 0) + 1
    budget = sum(p.max_new_frames for p in prepared)

    # What an earlier run of the same command already finished (a dry run reports it too).
    checkpoints = {"talker": checkpoint_fingerprint(synth.talker_path),
                   "codec": checkpoint_fingerprint(synth.codec_path)}
    fps = {p.request.id: request_fingerprint(p, synth, audio_format, checkpoints) for p in prepared}
    journal = Journal(out)
    done: dict[str, dict] = {}
    if not force:
        journal.load()
        if out.exists():
            done = plan_resume(out, journal, {rid: (fps[rid], names[rid]) for rid in fps}, force)
    orphans = orphan_files(out, set(names.values()))
    if dry_run:
        return SynthSummary(len(prepared), 0.0, 0.0, out, None, list(done.values()), resumed=len(done), dry_run=True,
                            frame_budget=budget, seed_sources=sources, frame_rate=synth.codec_config.frame_rate,
                            orphans=orphans, threads=synth.threads)

    synth.load()
    if force:
        journal.reset()
    out.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out)
    todo = [p for p in prepared if p.request.id not in done]
    if on_start:
        on_start(len(prepared), len(done))
    rate, channels = synth.codec.sample_rate, synth.codec.channels
    rows: dict[str, dict] = dict(done)
    manifest = out / "manifest.csv"
    writers: dict[str, ProgressiveAudio] = {}  # streaming: files grow chunk by chunk

    def sink(rid: str):
        writers[rid] = ProgressiveAudio(out / names[rid], rate, channels, audio_format)
        return writers[rid].write

    start = time.perf_counter()
    try:
        with interrupts_as_exceptions():
            for result in synth.run(todo, stream=stream, sinks=sink if stream else None):
                rid = result.request.id
                row = manifest_row(result, rate, channels, names[rid])
                journal.append(fps[rid], row)  # first the record, then the file: a kill leaves no orphan
                if stream:
                    writer = writers.pop(rid, None) or ProgressiveAudio(out / names[rid], rate, channels,
                                                                        audio_format)
                    writer.commit()
                else:
                    write_audio(out / names[rid], result.pcm, rate, audio_format)  # as each request finishes
                rows[rid] = row
                if on_result:
                    on_result(result)
    except KeyboardInterrupt:
        for writer in writers.values():
            writer.discard()
        write_manifest(manifest, [rows[p.request.id] for p in prepared if p.request.id in rows])
        raise
    wall = time.perf_counter() - start
    ordered = [rows[p.request.id] for p in prepared]  # input order, whatever finished first
    write_manifest(manifest, ordered)
    return SynthSummary(len(ordered), sum(r["duration_s"] for r in ordered), wall, out, manifest, ordered,
                        resumed=len(done), frame_budget=budget, seed_sources=sources,
                        frame_rate=synth.codec_config.frame_rate, orphans=orphans, threads=synth.threads)
