"""Fingerprints: short hashes that say whether two runs used the same inputs (resume, golden
baselines and audit environments compare them)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path


def fingerprint(parts: dict) -> str:
    """sha256 of a JSON-able description (keys sorted, so order never matters)."""
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


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
