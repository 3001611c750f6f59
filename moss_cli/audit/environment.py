"""The environment a result depends on, recorded in golden baselines."""

from __future__ import annotations

import platform

import torch

from .. import __version__
from ..model.checkpoint import checkpoint_fingerprint

def environment(synth) -> dict:
    device = synth.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {
        "moss_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": str(device),
        "device_name": name,
        "dtype": str(synth.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "talker_checkpoint": checkpoint_fingerprint(synth.talker_path),
        "codec_checkpoint": checkpoint_fingerprint(synth.codec_path),
        "deploy": str(synth.deploy.path) if synth.deploy.path else "built-in",
        "legacy_global_rng": synth.options.legacy_global_rng,
    }

