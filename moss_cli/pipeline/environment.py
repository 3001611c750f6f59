"""The environment a result depends on: recorded in golden baselines, audit reports and the output
directory of `moss synth` (so `moss diff` can name what changed between two machines)."""

from __future__ import annotations

import hashlib
import platform
from pathlib import Path

import torch
import yaml

from .. import __version__
from ..io.fingerprint import checkpoint_fingerprint
from ..numerics.layout import recorded


def deploy_sha256(path: Path) -> str:
    """sha256 over the bytes of a deploy file and of its base_config chain, in order.

    The path alone says nothing when the file is edited in place; this changes whenever the
    content does (comments included, which is fine: it is a hint at the cause of a drift)."""
    digest = hashlib.sha256()
    file, seen = path.expanduser().resolve(), set()
    while file is not None and file not in seen and file.is_file():
        seen.add(file)
        data = file.read_bytes()
        digest.update(data)
        try:
            base = yaml.safe_load(data)
        except yaml.YAMLError:  # the deploy loader already validated it; nothing more to follow
            break
        base = base.get("base_config") if isinstance(base, dict) else None
        file = (file.parent / base).expanduser().resolve() if isinstance(base, str) else None
    return digest.hexdigest()


def environment(synth, checkpoints: dict[str, str] | None = None) -> dict:
    """What `synth` (a Synthesizer) computes with: its engines' layout is read as they were built
    with it (`Synthesizer.layout`), never probed again. `checkpoints`: the talker's and codec's
    fingerprints when the caller has them already (hashing a real checkpoint reads up to a gigabyte)."""
    if checkpoints is None:
        checkpoints = {
            "talker": checkpoint_fingerprint(synth.talker_path),
            "codec": checkpoint_fingerprint(synth.codec_path),
        }
    device = synth.device
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    deploy = synth.deploy.path
    return {
        "moss_version": __version__,
        "torch_version": torch.__version__,
        "python_version": platform.python_version(),
        "device": str(device),
        "device_name": name,
        "dtype": str(synth.dtype).replace("torch.", ""),
        "threads": torch.get_num_threads(),
        "talker_checkpoint": checkpoints["talker"],
        "codec_checkpoint": checkpoints["codec"],
        "deploy": str(deploy) if deploy else "built-in",
        "deploy_sha256": deploy_sha256(deploy) if deploy else "built-in",
        "legacy_global_rng": synth.options.legacy_global_rng,
        "batch_invariant": synth.options.batch_invariant,
        "compile": synth.options.compile,
        "graphs": synth.options.graphs,
        **recorded(synth.layout, synth.codec.tiles),  # as the engine and the codec fixed them, not probed again
    }
