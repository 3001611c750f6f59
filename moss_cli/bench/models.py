"""The models `moss bench` measures: a checkpoint (the shipped tiny one by default) or random
weights at a preset's shapes (built in memory in the target dtype, after checking there is room for them)."""

from __future__ import annotations

from pathlib import Path

import torch

from ..assets import TINY_CODEC, TINY_TALKER
from ..assets.build import CodecSizes, TalkerSizes, codec_config, talker_config
from ..errors import MossError
from ..model.checkpoint import load_tokenizer
from ..model.codec import AudioCodec
from ..model.config import CodecConfig, TalkerConfig
from ..model.loading import load_codec, load_talker_model, ready_codec
from ..model.prompt import PromptBuilder
from ..model.talker import MossTTSLocal
from ..numerics import FAST, INVARIANT, Numerics
from ..threads import talker_parameters
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


@torch.no_grad()
def _random(module: torch.nn.Module, seed: int) -> torch.nn.Module:
    """Fill every parameter with small random values (speed does not depend on them), in place:
    a float32 copy of the largest table would add 1.5 GB to the v1.5 preset's peak memory."""
    gen = torch.Generator(device=next(module.parameters()).device).manual_seed(seed)
    for p in module.parameters():
        p.normal_(0.0, 0.02, generator=gen)
    return module


def bytes_needed(talker: TalkerConfig, dtype: torch.dtype) -> int:
    return talker_parameters(talker) * torch.finfo(dtype).bits // 8


def available_memory() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


@torch.no_grad()
def load_models(options: BenchOptions, device: torch.device, dtype: torch.dtype):
    """(talker model, codec config and loader, prompt builder, description) for the options."""
    tokenizer_dir = TINY_TALKER
    if options.random_weights is None:
        talker_dir = options.model or TINY_TALKER
        model = load_talker_model(talker_dir, device=device, dtype=dtype, pack=not options.compile)
        tokenizer_dir = talker_dir
        codec_dir = options.codec or TINY_CODEC

        def codec_for(numerics: Numerics) -> AudioCodec:
            return load_codec(codec_dir, device=device, dtype=dtype, numerics=numerics)

        what = str(talker_dir) if options.model else "tiny (shipped)"
    else:
        if options.random_weights not in PRESETS:
            raise MossError(
                f"unknown preset {options.random_weights!r}; expected tiny, 35m or v1.5", field="--random-weights"
            )
        sizes, overrides, codec_sizes = PRESETS[options.random_weights]
        raw = talker_config(sizes)
        for key in ("qwen3_config", "language_config"):
            raw[key] = {**raw[key], **overrides}
        cfg = TalkerConfig.from_dict(raw, f"preset {options.random_weights}")
        need, have = bytes_needed(cfg, dtype), available_memory()
        if have is not None and device.type == "cpu" and need > 0.9 * have:
            raise MossError(
                f"random {options.random_weights} weights need about {need / 2**30:.1f} GiB in {dtype}, "
                f"but only {have / 2**30:.1f} GiB is available",
                field="--random-weights",
            )
        with torch.device("meta"):
            model = MossTTSLocal(cfg)
        model = _random(model.to_empty(device=device).to(dtype), 0).eval()
        if not options.compile:
            model.pack_weights()
        codec_cfg = CodecConfig.from_dict(codec_config(codec_sizes), "preset codec")

        def codec_for(numerics: Numerics) -> AudioCodec:
            with torch.device("meta"):
                codec = AudioCodec(codec_cfg)
            return ready_codec(_random(codec.to_empty(device=device).to(dtype), 1), numerics)

        size = talker_parameters(cfg)
        size = f"{size / 1e6:.0f} M" if size >= 1e6 else f"{size / 1e3:.0f} k"
        what = f"random {options.random_weights} ({size} talker parameters)"
    prompts = PromptBuilder(load_tokenizer(Path(tokenizer_dir), model.cfg.special_token_ids), model.cfg)
    return model, codec_for, prompts, what
