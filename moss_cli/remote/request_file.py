"""A request file as a speech server gets it. Reference voices are sent inline (base64 `data:`
URIs), so each is checked here before any speech request is sent, and identified by its content;
fields the server would drop are refused (or, when allowed, reported): vllm-omni's MOSS-TTS-Local
drops some, moss serve none, so the server is asked what it is first (`SpeechClient.probe`). Every
problem of the file, of every kind, is reported at once."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ..config.request_fields import Problem
from ..config.requests import Request, RequestFileError, parse_requests
from ..io.reference_audio import ReferenceError, read_reference
from ..speech_api import DROPPED_BY_SERVER, dropped_fields
from .client import ServerInfo

ALLOW_DROPPED_HINT = "remove it, or pass --allow-dropped-fields to send it anyway"


def read_for_server(path: Path, server: ServerInfo, allow_dropped: bool = False) -> tuple[list[Request], list[str]]:
    """The requests of `path` as `server` (what its probe said) gets them, and warnings about the
    fields it would drop without a word (when `allow_dropped`; otherwise those are problems). moss
    serve honours every field of a request file; any other server is taken for vllm-omni's
    MOSS-TTS-Local, which drops those of DROPPED_BY_SERVER. Raises RequestFileError with every problem."""
    requests, problems = parse_requests(path)
    problems += reference_problems(requests)
    dropped = [Problem(r.line, name, DROPPED_BY_SERVER[name]) for r in requests for name in dropped_fields(r)]
    if server.is_moss_serve:  # it honours them all
        dropped = []
    if not allow_dropped:
        problems += [Problem(p.line, p.field, f"{p.message}; {ALLOW_DROPPED_HINT}") for p in dropped]
    if problems:
        raise RequestFileError(Path(path).expanduser(), sorted(problems, key=lambda p: p.line or 0))
    return requests, [f"line {p.line} [{p.field}]: {p.message}" for p in dropped]


def reference_problems(requests: list[Request]) -> list[Problem]:
    """Every reference file readable, non-empty, non-silent audio."""
    problems, checked = [], set()
    for request in requests:
        path = request.ref_audio
        if path is None or path in checked:
            continue
        checked.add(path)
        try:
            read_reference(path, 1, 24_000)  # the server resamples to its own rate and channels
        except ReferenceError as e:
            problems.append(Problem(request.line, "ref_audio", str(e)))
    return problems


def reference_sha256(request: Request) -> str | None:
    return hashlib.sha256(request.ref_audio.read_bytes()).hexdigest() if request.ref_audio is not None else None
