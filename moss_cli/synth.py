"""Batch synthesis: requests -> engine (talker) -> codec -> PCM -> audio files + manifest.

`Synthesizer` holds the loaded models and the resolved deploy config and runs any list of
requests through the continuous-batching engine; the audit drives it exactly as `moss synth`
does. `synthesize` adds the outputs (audio files and manifest).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import numpy as np
import torch

from .api import Talker, load_codec, load_talker
from .assets import TINY_CODEC, TINY_DEPLOY, TINY_TALKER
from .config.deploy import DeployConfig, load_deploy
from .config.effective import Effective, effective, frame_budget
from .config.requests import Problem, Request, RequestFileError, read_requests
from .device import resolve_device, resolve_dtype
from .engine.scheduler import ROW_BLOCK, Engine, GenerationRequest, GenerationResult, LogitsHook
from .errors import MossError
from .io.audio import FORMATS, codes_sha256, pcm_sha256, to_pcm16, write_audio
from .io.manifest import write_manifest
from .model.codec import AudioCodec


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


@dataclass
class Prepared:
    request: Request
    effective: Effective
    generation: GenerationRequest


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

    @property
    def frames(self) -> int:
        return int(self.codes.shape[0])


def platform_name(device: torch.device) -> str:
    if device.type == "cuda" and getattr(torch.version, "hip", None):
        return "rocm"
    return device.type


class Synthesizer:
    """Loaded talker + codec + deploy config."""

    def __init__(self, options: SynthOptions) -> None:
        if options.model is None and options.codec is not None or options.model is not None and options.codec is None:
            raise MossError("--model and --codec go together (a talker needs its audio tokenizer)", field="--codec")
        self.options = options
        self.device = resolve_device(options.device)
        self.dtype = resolve_dtype(options.dtype, self.device)
        deploy_path = options.deploy if options.deploy is not None else (TINY_DEPLOY if options.model is None else None)
        self.deploy: DeployConfig = load_deploy(deploy_path, platform_name(self.device))
        self.talker: Talker = load_talker(options.model or TINY_TALKER, device=self.device, dtype=self.dtype)
        self.codec_path = Path(options.codec or TINY_CODEC)
        codec_dtype = self.dtype if self.dtype != torch.float64 or self.device.type == "cpu" else torch.float32
        self.codec: AudioCodec = load_codec(self.codec_path, device=self.device, dtype=codec_dtype)
        self._check_pairing()
        self.max_batch = options.max_batch or self.deploy.max_num_seqs or 8

    def _check_pairing(self) -> None:
        cfg, codec = self.talker.config, self.codec
        if codec.num_quantizers < cfg.n_vq:
            raise MossError(f"the codec has {codec.num_quantizers} quantizers but the talker generates {cfg.n_vq} "
                            "codebooks per frame", field="--codec")
        if max(cfg.audio_codebook_sizes) > codec.cfg.quantizer.codebook_size:
            raise MossError(f"the talker's audio vocab ({max(cfg.audio_codebook_sizes)}) exceeds the codec's "
                            f"codebook size ({codec.cfg.quantizer.codebook_size})", field="--codec")
        if cfg.sampling_rate != codec.sample_rate:
            raise MossError(f"the talker expects {cfg.sampling_rate} Hz audio but the codec produces "
                            f"{codec.sample_rate} Hz", field="--codec")

    def prepare(self, requests: Sequence[Request], file: Path | None = None) -> list[Prepared]:
        """Build prompts and effective parameters; a text too long for max_model_len is an error."""
        prepared, problems = [], []
        for request in requests:
            prompt = self.talker.prompt(request.text, **request.prompt_fields)
            eff = effective(request, self.deploy)
            budget = frame_budget(request, self.deploy, prompt.shape[0])
            limit = self.deploy.max_model_len
            if limit is not None and prompt.shape[0] >= limit:
                problems.append(Problem(request.line, "text", f"the prompt is {prompt.shape[0]} tokens, but "
                                        f"max_model_len is {limit}: shorten the text"))
                continue
            prepared.append(Prepared(request, eff, GenerationRequest(
                key=request.id, prompt=prompt, max_new_frames=budget, audio=eff.audio, stop=eff.stop,
                seed=eff.seed, do_sample=eff.do_sample)))
        if problems:
            raise RequestFileError(file or Path("<requests>"), problems)
        return prepared

    def run(self, prepared: Sequence[Prepared], *, max_batch: int | None = None,
            logits_hook: LogitsHook | None = None) -> Iterator[SynthResult]:
        """Synthesise in the given order; yield each request as soon as its audio is decoded."""
        if self.options.legacy_global_rng:
            # Pre-fix behaviour: one global stream for every draw; seeded once per run, so a run
            # reproduces itself but not another batch composition.
            torch.manual_seed(self.deploy.default_seed if self.deploy.default_seed is not None else 0)
        by_key = {p.generation.key: p for p in prepared}
        engine = Engine(self.talker.model, max_batch=max_batch or self.max_batch,
                        legacy_global_rng=self.options.legacy_global_rng,
                        batch_invariant=self.options.batch_invariant, row_block=self.options.row_block,
                        logits_hook=logits_hook)
        for group in self._decode_groups(engine.run(p.generation for p in prepared)):
            for result, audio in zip(group, self.decode_many([r.codes for r in group])):
                p = by_key[result.key]
                yield SynthResult(p.request, p.effective, result.codes, audio, to_pcm16(audio), result.stopped,
                                  result.batch_size_seen, result.wall_s, int(p.generation.prompt.shape[0]))

    def _decode_groups(self, results: Iterator[GenerationResult]) -> Iterator[list[GenerationResult]]:
        """Batch-invariant mode decodes every request on its own. The fast mode decodes requests that
        finish in the same engine step together in one padded codec batch (as a throughput-minded
        server does), so a waveform's bits can depend on what it was decoded with."""
        if self.options.batch_invariant:
            for result in results:
                yield [result]
            return
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
        batch = torch.zeros(self.talker.config.n_vq, len(codes), max(lengths), dtype=torch.long)
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
    manifest: Path
    rows: list[dict] = field(default_factory=list)

    @property
    def real_time_factor(self) -> float:
        """Wall seconds per audio second (below 1 is faster than real time)."""
        return self.wall_s / self.audio_s if self.audio_s else float("nan")

    def as_dict(self) -> dict:
        return {"requests": self.requests, "audio_s": round(self.audio_s, 3), "wall_s": round(self.wall_s, 3),
                "real_time_factor": round(self.real_time_factor, 4), "out": str(self.out),
                "manifest": str(self.manifest)}


def manifest_row(result: SynthResult, sample_rate: int, channels: int, file: str) -> dict:
    eff = result.effective
    return {
        "id": result.request.id, "text": result.request.text, "seed": eff.seed, "seed_source": eff.seed_source,
        "frames": result.frames, "duration_s": round(result.pcm.shape[0] / sample_rate, 6),
        "sample_rate": sample_rate, "channels": channels, "codes_sha256": codes_sha256(result.codes),
        "pcm_sha256": pcm_sha256(result.pcm), "batch_size_seen": result.batch_size_seen,
        "wall_s": round(result.wall_s, 4), "file": file, "stopped": result.stopped,
        "temperature": eff.audio.temperature if eff.do_sample else 0.0, "top_p": eff.audio.top_p,
        "top_k": eff.audio.top_k, "repetition_penalty": eff.audio.repetition_penalty,
        "prompt_tokens": result.prompt_tokens,
    }


def synthesize(requests_path: Path, out: Path, options: SynthOptions, *, audio_format: str = "wav",
               on_start: Callable[[int], None] | None = None,
               on_result: Callable[[SynthResult], None] | None = None) -> SynthSummary:
    """Read and validate the request file, then synthesise it into `out` (audio files + manifest.csv)."""
    if audio_format not in FORMATS:
        raise MossError(f"unknown audio format {audio_format!r}; expected wav or flac", field="--format")
    requests = read_requests(requests_path)  # every problem reported before any model loads
    if out.exists() and not out.is_dir():
        raise MossError("output path exists and is not a directory", file=out, field="--out")
    synth = Synthesizer(options)
    prepared = synth.prepare(requests, requests_path)
    out.mkdir(parents=True, exist_ok=True)
    if on_start:
        on_start(len(prepared))
    rate, channels = synth.codec.sample_rate, synth.codec.channels
    rows: dict[str, dict] = {}
    start = time.perf_counter()
    for result in synth.run(prepared):
        name = f"{result.request.id}.{audio_format}"
        write_audio(out / name, result.pcm, rate, audio_format)  # written as each request finishes
        rows[result.request.id] = manifest_row(result, rate, channels, name)
        if on_result:
            on_result(result)
    wall = time.perf_counter() - start
    ordered = [rows[p.request.id] for p in prepared]  # manifest in input order, whatever finished first
    manifest = out / "manifest.csv"
    write_manifest(manifest, ordered)
    return SynthSummary(len(ordered), sum(r["duration_s"] for r in ordered), wall, out, manifest, ordered)
