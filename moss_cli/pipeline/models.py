"""The deploy config, talker and codec a run uses. Configs and the tokenizer are read at once
(enough to validate every request); the weights load on first use."""

from __future__ import annotations

from pathlib import Path

import torch

from ..assets import TINY_CODEC, TINY_DEPLOY, TINY_TALKER
from ..config.deploy import DeployConfig, load_deploy
from ..device import resolve_device, resolve_dtype
from ..errors import MossError
from ..model.checkpoint import (
    checkpoint_dir,
    load_tokenizer,
    read_codec_config,
    read_talker_config,
)
from ..model.codec import AudioCodec
from ..model.config import CodecConfig, TalkerConfig
from ..model.loading import load_codec, load_talker_model
from ..model.prompt import PromptBuilder
from ..model.talker import MossTTSLocal
from ..threads import apply_threads
from .options import SynthOptions


def platform_name(device: torch.device) -> str:
    """The deploy file's `platforms:` section that applies on `device`."""
    if device.type == "cuda" and getattr(torch.version, "hip", None):
        return "rocm"
    return device.type


def check_pairing(talker: TalkerConfig, codec: CodecConfig, codec_path: Path) -> None:
    """A talker and a codec that cannot work together are a configuration error, found before loading."""
    quantizer = codec.quantizer
    if quantizer.num_quantizers < talker.n_vq:
        raise MossError(
            f"the codec has {quantizer.num_quantizers} quantizers but the talker generates "
            f"{talker.n_vq} codebooks per frame",
            file=codec_path,
            field="quantizer_kwargs",
        )
    if max(talker.audio_codebook_sizes) > quantizer.codebook_size:
        raise MossError(
            f"the talker's audio vocab ({max(talker.audio_codebook_sizes)}) exceeds the codec's "
            f"codebook size ({quantizer.codebook_size})",
            file=codec_path,
            field="quantizer_kwargs",
        )
    if talker.sampling_rate != codec.sampling_rate:
        raise MossError(
            f"the talker expects {talker.sampling_rate} Hz audio but the codec produces {codec.sampling_rate} Hz",
            file=codec_path,
            field="sampling_rate",
        )


class Models:
    def __init__(self, options: SynthOptions) -> None:
        if (options.model is None) != (options.codec is None):
            raise MossError("--model and --codec go together (a talker needs its audio tokenizer)", field="--codec")
        self.options = options
        self.device = resolve_device(options.device)
        self.dtype = resolve_dtype(options.dtype, self.device)
        deploy_path = options.deploy if options.deploy is not None else (TINY_DEPLOY if options.model is None else None)
        self.deploy: DeployConfig = load_deploy(
            deploy_path, platform_name(self.device), allow_foreign=options.allow_foreign_deploy
        )
        self.talker_path = Path(options.model or TINY_TALKER)
        self.codec_path = Path(options.codec or TINY_CODEC)
        self.talker_config = read_talker_config(self.talker_path)
        self.codec_config = read_codec_config(self.codec_path)
        check_pairing(self.talker_config, self.codec_config, self.codec_path)
        self.threads = apply_threads(options.threads, self.talker_config)
        tokenizer = load_tokenizer(checkpoint_dir(self.talker_path), self.talker_config.special_token_ids)
        self.prompts = PromptBuilder(tokenizer, self.talker_config)
        self._talker: MossTTSLocal | None = None
        self._codec: AudioCodec | None = None

    @property
    def talker(self) -> MossTTSLocal:
        if self._talker is None:
            pack = not self.options.compile  # packed weights run faster eager, but cannot be compiled
            self._talker = load_talker_model(self.talker_path, device=self.device, dtype=self.dtype, pack=pack)
        return self._talker

    @property
    def codec(self) -> AudioCodec:
        if self._codec is None:
            dtype = self.dtype if self.dtype != torch.float64 or self.device.type == "cpu" else torch.float32
            self._codec = load_codec(self.codec_path, device=self.device, dtype=dtype, numerics=self.options.numerics)
        return self._codec

    def load(self) -> None:
        """Load both models now (errors in the weights surface here, before any output is written)."""
        _ = self.talker, self.codec
