"""The Python API: `load_talker` and `load_codec`, mirroring the reference's shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from .device import resolve_device, resolve_dtype
from .engine.generate import generate_invariant, generate_padded
from .engine.sampling import Generators
from .errors import CheckpointError, MossError
from .model.checkpoint import (
    checkpoint_dir,
    load_tokenizer,
    load_weights,
    read_codec_config,
    read_talker_config,
    tensor_files,
)
from .model.codec import AudioCodec, adapt_projections, canonical_codec_key
from .model.config import TalkerConfig
from .model.prompt import PromptBuilder, left_pad
from .model.talker import MossTTSLocal
from .numerics import Numerics, kernels
from .numerics.layout import codec_tiles
from .sampling_params import HeadSampling


class Talker:
    """A loaded MOSS-TTS-Local talker: `.config`, `.model`, `.generate(...)`, `.prompt(...)`."""

    def __init__(self, model: MossTTSLocal, path: Path, device: torch.device, dtype: torch.dtype) -> None:
        self.model = model
        self.config: TalkerConfig = model.cfg
        self.path = path
        self.device = device
        self.dtype = dtype
        self._prompts: PromptBuilder | None = None

    @property
    def prompts(self) -> PromptBuilder:
        """Prompt builder with the checkpoint's tokenizer (loaded on first use)."""
        if self._prompts is None:
            tokenizer = load_tokenizer(self.path, self.config.special_token_ids)
            self._prompts = PromptBuilder(tokenizer, self.config)
        return self._prompts

    def prompt(self, text: str, **fields) -> torch.Tensor:
        return self.prompts.build(text, **fields)

    def batch(self, prompts: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        return left_pad(prompts, self.config)

    def generate(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        *,
        max_new_frames: int = 4096,
        do_sample: bool = True,
        temperature: float = 1.7,
        top_p: float = 0.8,
        top_k: int = 25,
        repetition_penalty: float = 1.0,
        text_temperature: float = 1.0,
        text_top_p: float = 1.0,
        text_top_k: int = 50,
        generator: torch.Generator | None = None,
        generators: Sequence[torch.Generator | None] | None = None,
        reference_loop: bool = False,
    ) -> list[torch.Tensor]:
        """input_ids [B, T, 1 + n_vq] (left-padded), attention_mask [B, T] -> one [frames, n_vq] per row.

        `generator` is one random stream for the batch (None: the global RNG); `generators` gives
        each row its own stream. By default every row's logits are bitwise what they would be alone
        (the batch-invariant engine); `reference_loop=True` runs the reference's padded-batch loop
        (and, with one shared stream, its batched draws) exactly.
        """
        if input_ids.dim() == 2:
            input_ids = input_ids.unsqueeze(0)
        if input_ids.dim() != 3 or input_ids.shape[-1] != self.config.n_vq + 1:
            raise ValueError(f"input_ids must be [B, T, {self.config.n_vq + 1}], got {tuple(input_ids.shape)}")
        if attention_mask is None:
            attention_mask = torch.ones(input_ids.shape[:2], dtype=torch.bool)
        elif attention_mask.dim() == 1:
            attention_mask = attention_mask.unsqueeze(0)
        if generator is not None and generators is not None:
            raise ValueError("pass either generator or generators, not both")
        if generators is not None and len(generators) != input_ids.shape[0]:
            raise ValueError("generators must have one entry per row")
        rng: Generators = list(generators) if generators is not None else generator
        run = generate_padded if reference_loop else generate_invariant
        return run(
            self.model,
            input_ids.to(self.device),
            attention_mask.to(self.device),
            max_new_frames=int(max_new_frames),
            do_sample=do_sample,
            audio=HeadSampling(temperature, top_p, top_k, repetition_penalty),
            stop=HeadSampling(text_temperature, text_top_p, text_top_k),
            generators=rng,
        )


def load_talker(
    path: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype = "auto", pack: bool = True
) -> Talker:
    """Load a MOSS-TTS-Local talker from a checkpoint directory (config.json + safetensors).

    `pack` (where available: CPU, float32 or bfloat16) lays the weights out for oneDNN's faster
    eager products (`MossTTSLocal.pack_weights`); pass False to torch.compile the model."""
    directory = checkpoint_dir(path)
    cfg = read_talker_config(directory)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    with torch.device("meta"):
        model = MossTTSLocal(cfg)
    pack = pack and kernels.can_pack(torch.empty(0, device=dev, dtype=dt))
    # Weights about to be packed are read into memory rather than mapped (see load_weights' `copy`).
    load_weights(model, directory, device=dev, dtype=dt, tied=MossTTSLocal.tied_keys(cfg), copy=pack)
    if pack:
        model.pack_weights()
    return Talker(model.eval(), directory, dev, dt)


def load_codec(
    path: str | Path,
    device: str | torch.device = "auto",
    dtype: str | torch.dtype = "auto",
    numerics: Numerics | None = None,
    pack: bool = True,
) -> AudioCodec:
    """Load a MOSS-Audio-Tokenizer (v1 or v2 layout). The quantizer always stays float32.

    `numerics=None` keeps the reference's plain kernels; `Numerics()` (batch-invariant) computes in
    fixed tiles, so a waveform's bits do not depend on what it is decoded with or on chunking.
    `pack` (CPU, float32 or bfloat16) lays the transformer weights out for oneDNN's faster product."""
    directory = checkpoint_dir(path)
    cfg = read_codec_config(directory)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    with torch.device("meta"):
        codec = AudioCodec(cfg)
    keys = {canonical_codec_key(k) for k in tensor_files(directory)}
    with torch.device("meta"):
        adapt_projections(codec, keys)
    load_weights(
        codec,
        directory,
        device=dev,
        dtype=dt,
        rename=canonical_codec_key,
        float32_params=lambda name: name.startswith("quantizer."),
        copy=pack and kernels.can_pack(torch.empty(0, device=dev, dtype=dt)),  # as load_talker
    )
    if pack:
        codec.pack_weights()
    codec.tiles = codec_tiles(codec, numerics)
    return codec.eval()


__all__ = ["Talker", "load_talker", "load_codec", "MossError", "CheckpointError"]
