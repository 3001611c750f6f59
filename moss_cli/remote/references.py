"""Reference voices a request file names: sent inline (base64 `data:` URIs), so each is checked
here before anything is sent, and identified by its content."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config.requests import Request
from ..errors import MossError
from ..io.reference_audio import ReferenceError, read_reference


def check_references(requests: list[Request], file: Path | None) -> None:
    """Every reference file readable, non-empty, non-silent audio; all problems at once."""
    problems, checked = [], set()
    for request in requests:
        path = request.ref_audio
        if path is None or path in checked:
            continue
        checked.add(path)
        try:
            read_reference(path, 1, 24_000)  # the server resamples to its own rate and channels
        except ReferenceError as e:
            problems.append(f"line {request.line} [ref_audio]: {e}")
    if problems:
        raise MossError("; ".join(problems), file=file)


def reference_sha256(request: Request) -> str | None:
    return hashlib.sha256(request.ref_audio.read_bytes()).hexdigest() if request.ref_audio is not None else None
