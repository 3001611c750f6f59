"""The Python API: `load_talker` and `load_codec`, mirroring the reference's shapes.

A public face only: nothing inside moss_cli imports it. Loading lives in `moss_cli.model.loading`,
generation in `moss_cli.engine.generate` (the reference's loop in `moss_cli.engine.reference`);
`Talker` joins them for a caller."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch

from .device import resolve_device, resolve_dtype
from .engine.generate import generate_invariant
from .engine.reference import Generators, generate_padded
from .errors import CheckpointError, MossError
from .model.checkpoint import checkpoint_dir, load_tokenizer
from .model.config import TalkerConfig
from .model.loading import load_codec, load_talker_model
from .model.prompt import PromptBuilder, left_pad
from .model.talker import MossTTSLocal
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
    model = load_talker_model(path, device=device, dtype=dtype, pack=pack)
    dev = resolve_device(device)
    return Talker(model, checkpoint_dir(path), dev, resolve_dtype(dtype, dev))


__all__ = ["Talker", "load_talker", "load_codec", "MossError", "CheckpointError"]
