"""A changed environment field (a run's or a golden file's), in words: the audit (audit/golden.py) and
`moss diff` (diff/causes.py) name what changed between two runs with it."""

from __future__ import annotations

# Environment fields that are content hashes: their values mean nothing to people, so only a
# prefix is shown.
_HASHES = {
    "talker_checkpoint": "talker checkpoint",
    "codec_checkpoint": "codec checkpoint",
    "deploy_sha256": "deploy file content",
}
_LABELS = {"engine_steps": "decode-step layout", "codec_tiles": "codec tiles", "linear_kernel": "linear kernel"}


def describe_change(key: str, before, now) -> str:
    """A recorded environment field that differs between two runs (or a run and its golden file),
    for people: a content hash shows only its first 12 characters."""
    if key in _HASHES:
        return f"{_HASHES[key]} changed ({str(before)[:12]} -> {str(now)[:12]})"
    return f"{_LABELS.get(key, key)} {before} -> {now}"
