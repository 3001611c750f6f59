"""The models `moss bench` measures: a checkpoint (the shipped tiny one by default) or random
weights at a preset's shapes (built in memory in the target dtype, after checking there is room
for the whole run: `memory_needed`)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..assets import TINY_CODEC, TINY_TALKER
from ..assets.build import CodecSizes, TalkerSizes, codec_config, talker_config
from ..engine.kv_cache import KVPool
from ..errors import MossError
from ..model.checkpoint import load_tokenizer, read_codec_config, read_talker_config
from ..model.codec import AudioCodec
from ..model.config import CodecConfig, TalkerConfig
from ..model.loading import load_codec, load_talker_model, ready_codec
from ..model.prompt import PromptBuilder
from ..model.talker import MossTTSLocal
from ..numerics import FAST, INVARIANT, Layout, Numerics
from ..numerics.layout import most_step_rows
from ..threads import talker_parameters
from .floor import COPY_BYTES
from .options import BenchOptions

MODES = {"invariant": INVARIANT, "fast": FAST}
# Random-weight presets: the tiny shipped model's shapes, the 35 M talker of the figures in
# benchmarks/RESULTS.md, and the MOSS-TTS-Local v1.5 shapes (Qwen3-4B backbone: 36 x 2560, heads 32/8 x 128,
# FFN 9728).
PRESETS = {
    "tiny": (TalkerSizes(), {}, CodecSizes()),
    "35m": (
        TalkerSizes(
            hidden=512, layers=8, heads=8, kv_heads=4, ffn=1536, local_heads=8, local_ffn=1536, n_vq=12, codebook=1024
        ),
        {},
        CodecSizes(
            d_model=128, heads=4, layers=2, code_dim=128, rvq_dim=64, quantizers=16, codebook=1024, codebook_dim=8
        ),
    ),
    "v1.5": (
        TalkerSizes(
            hidden=2560,
            layers=36,
            heads=32,
            kv_heads=8,
            ffn=9728,
            local_heads=32,
            local_ffn=9728,
            n_vq=12,
            codebook=1024,
        ),
        {"head_dim": 128, "vocab_size": 151936},
        CodecSizes(
            d_model=128, heads=4, layers=2, code_dim=128, rvq_dim=64, quantizers=32, codebook=1024, codebook_dim=8
        ),
    ),
}
PROMPT = "A benchmark sentence of ordinary length, read at an even pace."
# What a run allocates beyond its tensors (oneDNN and ATen caches, the allocator's slack, the
# tokenizer): 0.02-0.18 GiB measured on the tiny and 35m presets (the most with oneDNN's packing).
RUNTIME_BYTES = 256 * 2**20
# A codec decode holds a few waveform-sized activations at once: about 5x its output measured
# on the presets' codec (B=8, 256 frames).
CODEC_ACTIVATIONS = 8


@torch.no_grad()
def _random(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Fill every parameter with small random values (speed does not depend on them), in place."""
    gen = torch.Generator(device=next(module.parameters()).device).manual_seed(seed)
    for p in module.parameters():
        p.normal_(0.0, 0.02, generator=gen)
    return module


def _built(module: torch.nn.Module, device: torch.device, dtype: torch.dtype, seed: int) -> torch.nn.Module:
    """A module made on the meta device, given random weights allocated directly in `dtype`
    (converting after allocating would hold a float32 copy of every weight at once)."""
    return _random(module.to(dtype).to_empty(device=device), seed)


def preset_configs(name: str) -> tuple[TalkerConfig, CodecConfig]:
    if name not in PRESETS:
        raise MossError(f"unknown preset {name!r}; expected tiny, 35m or v1.5", field="--random-weights")
    sizes, overrides, codec_sizes = PRESETS[name]
    raw = talker_config(sizes)
    for key in ("qwen3_config", "language_config"):
        raw[key] = {**raw[key], **overrides}
    return TalkerConfig.from_dict(raw, f"preset {name}"), CodecConfig.from_dict(
        codec_config(codec_sizes), "preset codec"
    )


def _step_rows(mode: str, batch: int) -> int:
    """The most rows a decode step of `batch` requests computes in `mode`, padding included (the
    engine's padding rule, `StepLayout.padded`, at the largest layout the mode may choose)."""
    try:
        numerics = MODES.get(mode) or Numerics(layout=Layout.parse(mode))
    except ValueError:  # an unknown mode (refused before anything runs)
        return batch
    return most_step_rows(numerics, batch)


def memory_needed(
    cfg: TalkerConfig,
    codec_cfg: CodecConfig,
    dtype: torch.dtype,
    options: BenchOptions,
    prompt_tokens: int,
    batch: int,
) -> dict[str, int]:
    """Bytes a bench run of `batch` requests adds to the process at its peak, by part: what it keeps
    (the weights, the packed audio heads, one codec per mode, the runtime's own) and the largest of
    what comes and goes (packing one weight; the KV cache, with the old one while it grows, and a
    prefill forward or a decode step's attention; the floor's reading of a cache; a codec decode; the
    copy that measures the bandwidth)."""
    size = torch.finfo(dtype).bits // 8
    b = cfg.backbone
    packs = options.pack and not options.compile and dtype in (torch.float32, torch.bfloat16)
    with torch.device("meta"):
        codec = AudioCodec(codec_cfg)
    codec_bytes = sum(p.numel() * (4 if n.startswith("quantizer.") else size) for n, p in codec.named_parameters())
    widest = max(b.intermediate_size, b.num_heads * b.head_dim) * b.hidden_size
    packing = max(widest, cfg.hidden_size * cfg.local.inner_size) * size if packs else 0  # one weight at a time
    # The KV pool as the engine grows it (its own rule, on the meta device): the scratch slot and
    # one per request. While it grows, the old pool (at most half the new one) is still held.
    pool = KVPool(b.num_layers, b.num_kv_heads, b.head_dim, torch.device("meta"), dtype)
    for _ in range(batch):
        pool.allocate(prompt_tokens + options.frames)
    kv = 2 * pool.keys.numel() * size * 3 // 2
    # One prefill forward: a layer's live activations per row, and its float32 attention scores.
    rows = max(prompt_tokens, min(batch * prompt_tokens, max(m.prefill_rows for m in MODES.values())))
    per_row = 8 * b.hidden_size + 4 * b.intermediate_size + 4 * b.num_heads * b.head_dim
    prefill = rows * per_row * size + b.num_heads * rows * rows * 4
    # A decode step's attention reads one layer's keys and values of its padded rows in float32;
    # the floor reads a cache of those rows, every layer, at the run's length (floor.kv_read_step).
    step_rows = max(_step_rows(mode, batch) for mode in options.modes)
    row_kv = 2 * b.num_kv_heads * pool.keys.shape[3] * b.head_dim  # one layer's keys and values of a row
    decode = step_rows * row_kv * 4
    kv_read = step_rows * row_kv * b.num_layers * size
    audio = batch * options.frames * codec_cfg.downsample_rate * codec_cfg.channels * 4  # float32 samples
    return {
        "weights": talker_parameters(cfg) * size,
        "packed audio heads": sum(cfg.audio_codebook_sizes) * cfg.hidden_size * size if packs else 0,
        "codecs": len(options.modes) * codec_bytes,
        "runtime": RUNTIME_BYTES,
        "KV cache and activations": max(
            packing, kv + max(prefill, decode), kv_read, CODEC_ACTIVATIONS * audio, 2 * COPY_BYTES
        ),
    }


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_memory(need: dict[str, int], options: BenchOptions, dtype: torch.dtype, batch: int) -> None:
    """Refuse a run whose peak (`memory_needed`) would not fit in the memory available now,
    rather than be killed by the kernel halfway."""
    total, have = sum(need.values()), available_memory()
    if have is None or total <= have:
        return
    gib = 2**30
    parts = ", ".join(f"{name} {n / gib:.1f} GiB" for name, n in need.items() if n >= 0.05 * gib)
    model = f"--random-weights {options.random_weights}" if options.random_weights else f"--model {options.model}"
    hints = ["--dtype bfloat16 (half the memory of float32)"] if torch.finfo(dtype).bits > 16 else []
    hints += ["a smaller --batch"] * (batch > 1) + ["fewer --frames"] * (options.frames > 32)
    hints.append("freeing memory")
    advice = " or ".join(hints) if len(hints) < 3 else ", ".join(hints[:-1]) + " or " + hints[-1]
    raise MossError(
        f"{model} --dtype {str(dtype).removeprefix('torch.')} --batch {batch} needs about {total / gib:.1f} GiB "
        f"at its peak ({parts}), but only {have / gib:.1f} GiB is available; try {advice}",
        field="--random-weights" if options.random_weights else "--model",
    )


@torch.no_grad()
def load_models(options: BenchOptions, device: torch.device, dtype: torch.dtype):
    """(talker model, codec config and loader, prompt builder, description) for the options, after
    checking (on a CPU) that the run's peak at its largest batch fits in the memory available."""
    if options.random_weights is None:
        talker_dir, codec_dir = options.model or TINY_TALKER, options.codec or TINY_CODEC
        cfg, codec_cfg = read_talker_config(talker_dir), read_codec_config(codec_dir)
    else:
        talker_dir = codec_dir = None
        cfg, codec_cfg = preset_configs(options.random_weights)
    prompts = PromptBuilder(load_tokenizer(Path(talker_dir or TINY_TALKER), cfg.special_token_ids), cfg)
    if device.type == "cpu":
        batch = max(options.batches)
        need = memory_needed(cfg, codec_cfg, dtype, options, int(prompts.build(PROMPT).shape[0]), batch)
        check_memory(need, options, dtype, batch)
    pack = options.pack and not options.compile
    if talker_dir is not None:
        model = load_talker_model(talker_dir, device=device, dtype=dtype, pack=pack)

        def codec_for(numerics: Numerics) -> AudioCodec:
            return load_codec(codec_dir, device=device, dtype=dtype, numerics=numerics, pack=options.pack)

        what = str(talker_dir) if options.model else "tiny (shipped)"
    else:
        with torch.device("meta"):
            model = MossTTSLocal(cfg)
        model = _built(model, device, dtype, 0).eval()
        if pack:
            model.pack_weights()

        def codec_for(numerics: Numerics) -> AudioCodec:
            with torch.device("meta"):
                codec = AudioCodec(codec_cfg)
            return ready_codec(_built(codec, device, dtype, 1), numerics, options.pack)

        size = talker_parameters(cfg)
        size = f"{size / 1e6:.0f} M" if size >= 1e6 else f"{size / 1e3:.0f} k"
        what = f"random {options.random_weights} ({size} talker parameters)"
    return model, codec_for, prompts, what
