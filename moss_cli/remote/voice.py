"""Whether a speech server requires a reference voice: vllm-omni's MOSS-TTS-Local refuses a request
without `ref_audio` (tts_adapters/moss_tts.py:420-431 in the 0.30.0 wheel: "MOSS-TTS-Local-Transformer
requires 'ref_audio' ..."), `moss serve` does not. Learnt from the server's answer to one short
request sent without one, by every client that makes requests of its own (the server audit, the bench)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..config.requests import Request
from ..errors import MossError
from .client import ServerError, SpeechClient

PROBE_FRAMES = 2  # the probe's max_new_tokens: its audio is not used


async def voice_refusal(client: SpeechClient, request: str, body: dict[str, Any]) -> str | None:
    """The server's words where it refuses `body` (a request without `ref_audio`) for want of a
    reference voice; None where it answers with audio. Any other refusal or failure is raised."""
    try:
        await client.speak(request, body | {"max_new_tokens": PROBE_FRAMES}, "reference-voice-check")
    except ServerError as e:
        if e.status != 400 or "ref_audio" not in e.message:
            raise
        return e.message.split(": HTTP 400 Bad Request: ")[-1]
    return None


def refuse_unvoiced(said: str, requests: list[Request], requests_file: Path | None) -> None:
    """Where the server requires a reference voice (`said`: its words), a request file's requests go
    as written, so one without `ref_audio` is an error naming its line; built-in requests (no file)
    are given a voice by the caller."""
    missing = [r for r in requests if r.ref_audio is None]
    if requests_file is not None and missing:
        raise MossError(
            f"the server requires a reference voice (it answers a request without one: {said!r}), and the "
            f"request(s) on line(s) {', '.join(str(r.line) for r in missing)} have no ref_audio",
            file=requests_file,
            line=missing[0].line,
            field="ref_audio",
        )
