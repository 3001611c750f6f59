"""`moss synth --server`: the job (job.py) with a running speech server as its source, into the
same output directory as local synthesis (one file per request as it finishes, the resume
journal, the manifest; atomic writes).

The manifest has the local columns. What only the server knows comes from `moss serve`'s headers
(effective seed and its source, frames, codes hash, requests in flight, stop reason); a server
that sends none (vllm-omni) leaves those cells empty and `seed_source` `unknown` for requests
without a seed. The sampling columns hold the request's own overrides (the server's defaults are
not visible from outside)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Callable, NamedTuple

from ..config.effective import SeedSource
from ..config.requests import Request
from ..io.fingerprint import fingerprint
from ..remote.client import Retry, SpeechClient, probe
from ..remote.reply import Reply
from ..remote.request_file import read_for_server, reference_sha256
from ..remote.settings import ServerOptions
from ..speech_api import body_from_request
from .job import Deliver, Facts, Planned, StreamTo, SynthSummary, run_job


class Served(NamedTuple):
    request: Request
    reply: Reply


def remote_fingerprint(request: Request, server: ServerOptions, audio_format: str) -> str:
    """What made a file: the request's content and the server that answered it (a re-run against
    another server, model or answer format regenerates it)."""
    return fingerprint(
        {
            "text": request.text,
            "fields": request.prompt_fields,
            "seed": request.seed,
            "sampling": request.sampling,
            "max_new_frames": request.max_new_frames,
            "ref_audio": reference_sha256(request),
            "ref_text": request.ref_text,
            "format": audio_format,
            "server": server.public_url,
            "model": server.model,
            "response_format": server.response_format,
            "pcm_layout": [server.sample_rate, server.channels] if server.response_format == "pcm" else None,
        }
    )


class ServerSource:
    """The job's `Source` through a running speech server: up to `--concurrency` requests in flight;
    on the first failure the rest are cancelled and the error is raised (what finished stays)."""

    def __init__(
        self,
        server: ServerOptions,
        *,
        allow_dropped_fields: bool = False,
        on_warning: Callable[[str], None] | None = None,
        on_retry: Callable[[Retry], None] | None = None,
    ) -> None:
        self.server = server
        self.allow_dropped_fields, self.on_warning, self.on_retry = allow_dropped_fields, on_warning, on_retry
        # The folder appears with the first answer: a server that never answers leaves nothing behind.
        self.facts = Facts(server=server.public_url, folder_first=False, failure_keeps_manifest=True)
        self.requests: dict[str, Request] = {}

    def plan(self, requests_path: Path, audio_format: str) -> Planned:
        """The request file's requests, checked against the server, which is asked what it is first
        (a dry run too: whether a field is dropped depends on the server)."""
        requests, dropped = read_for_server(requests_path, probe(self.server), self.allow_dropped_fields)
        for warning in dropped:
            if self.on_warning:
                self.on_warning(f"sent although vllm-omni drops it: {warning}")
        self.requests = {r.id: r for r in requests}
        return Planned(
            fingerprints={r.id: remote_fingerprint(r, self.server, audio_format) for r in requests},
            # The server seeds the requests that carry no seed of their own.
            seed_sources=dict(
                Counter(SeedSource.REQUEST if r.seed is not None else SeedSource.SERVER for r in requests)
            ),
            frame_budget=sum(r.max_new_frames or 0 for r in requests),
        )

    def start(self) -> None:
        """Nothing to load: the probe in `plan` found the server there."""

    def run(self, ids: list[str], stream_to: StreamTo | None, deliver: Deliver) -> None:
        asyncio.run(self._send_all([self.requests[rid] for rid in ids], deliver))

    async def _send_all(self, todo: list[Request], deliver: Deliver) -> None:
        """Send everything (the client bounds how many are in flight); deliver each answer as it comes."""
        server = self.server
        async with SpeechClient(server, self.on_retry) as client:
            started = time.perf_counter()

            async def one(request: Request) -> Served:
                body = body_from_request(request, model=server.model, response_format=server.response_format)
                return Served(request, await client.speak(request.id, body, "synth", started))

            tasks = [asyncio.ensure_future(one(r)) for r in todo]
            try:
                for finished in asyncio.as_completed(tasks):
                    served = await finished
                    deliver(served.reply.outcome(served.request, served.request.seed), served)
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)

    def environment(self) -> None:
        return None  # the server's own, which it does not tell

    def compile_s(self) -> None:
        return None


def synthesize_remote(
    requests_path: Path,
    out: Path,
    server: ServerOptions,
    *,
    allow_dropped_fields: bool = False,
    on_warning: Callable[[str], None] | None = None,
    on_retry: Callable[[Retry], None] | None = None,
    **job,
) -> SynthSummary:
    """`moss synth --server`: the job (`job.run_job`'s keywords) through a running speech server."""
    source = ServerSource(server, allow_dropped_fields=allow_dropped_fields, on_warning=on_warning, on_retry=on_retry)
    return run_job(source, requests_path, out, **job)
