"""The environment a result depends on, recorded in golden baselines."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import torch

from .. import __version__

FULL_HASH_LIMIT = 1 << 30  # hash whole checkpoints up to 1 GiB; sample larger ones


def checkpoint_fingerprint(directory: Path) -> str:
    """sha256 over config.json and the safetensors files. Files over 1 GiB in total are sampled
    (header + 64 KiB at 64 evenly spaced offsets per file) to keep this fast on real checkpoints."""
    files = sorted([directory / "config.json", *directory.glob("*.safetensors")])
    total = sum(f.stat().st_size for f in files if f.is_file())
    digest = hashlib.sha256()
    for f in files:
        if not f.is_file():
            continue
        digest.update(f.name.encode())
        size = f.stat().st_size
        digest.update(str(size).encode())
        with f.open("rb") as handle:
            if total <= FULL_HASH_LIMIT:
                for block in iter(lambda: handle.read(1 << 20), b""):
                    digest.update(block)
            else:
                for i in range(64):
                    handle.seek(size * i // 64)
                    digest.update(handle.read(1 << 16))
    return ("sha256:" if total <= FULL_HASH_LIMIT else "sampled-sha256:") + digest.hexdigest()


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
        "talker_checkpoint": checkpoint_fingerprint(synth.talker.path),
        "codec_checkpoint": checkpoint_fingerprint(synth.codec_path),
        "deploy": str(synth.deploy.path) if synth.deploy.path else "built-in",
        "legacy_global_rng": synth.options.legacy_global_rng,
    }

