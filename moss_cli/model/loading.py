"""Checkpoints into models: a talker (`load_talker_model`), a codec (`load_codec`), and the last
steps every codec takes whatever its weights came from (`ready_codec`). Weights are built on the
meta device and filled once, in the target device and dtype."""

from __future__ import annotations

from pathlib import Path

import torch

from ..device import resolve_device, resolve_dtype
from ..numerics import Numerics, kernels
from ..numerics.layout import codec_tiles
from .checkpoint import checkpoint_dir, load_weights, read_codec_config, read_talker_config, tensor_files
from .codec import AudioCodec, adapt_projections, canonical_codec_key
from .talker import MossTTSLocal


def load_talker_model(
    path: str | Path, device: str | torch.device = "auto", dtype: str | torch.dtype = "auto", pack: bool = True
) -> MossTTSLocal:
    """A MOSS-TTS-Local talker from a checkpoint directory (config.json + safetensors), in eval mode.

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
    return model.eval()


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
        copy=pack and kernels.can_pack(torch.empty(0, device=dev, dtype=dt)),  # as load_talker_model
    )
    return ready_codec(codec, numerics, pack)


def ready_codec(codec: AudioCodec, numerics: Numerics | None, pack: bool = True) -> AudioCodec:
    """A codec whose weights are in place, made ready to decode: the quantizer in float32, the
    transformer weights packed (`pack`), the row tiles `numerics` asks for, eval mode."""
    codec.quantizer.float()
    if pack:
        codec.pack_weights()
    codec.tiles = codec_tiles(codec, numerics)
    return codec.eval()
