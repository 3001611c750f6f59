"""`moss synth --server` as a job: a requests file synthesised through a running speech server,
with up to `--concurrency` requests in flight, into the same output directory as local synthesis
(io/output_dir.py: one file per request as it finishes, the resume journal, the manifest; atomic
writes), stopping cleanly on SIGINT/SIGTERM.

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

from ..config.requests import Request
from ..errors import MossError
from ..interrupts import check_interrupted, interrupts_as_exceptions
from ..io.fingerprint import fingerprint
from ..io.manifest import manifest_row
from ..io.output_dir import OutputDir
from ..remote.client import Retry, SpeechClient
from ..remote.reply import Reply
from ..remote.request_file import read_for_server, reference_sha256
from ..remote.settings import ServerOptions
from ..speech_api import body_from_request
from .local import SynthSummary


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


async def _send_all(
    todo: list[Request],
    server: ServerOptions,
    outdir: OutputDir,
    on_result: Callable[[Served], None] | None,
    on_retry: Callable[[Retry], None] | None,
) -> None:
    """Send everything (the client bounds how many are in flight); record each answer as it comes.
    On the first failure the rest are cancelled and the error is raised."""
    async with SpeechClient(server, on_retry) as client:
        started = time.perf_counter()

        async def one(request: Request) -> Served:
            body = body_from_request(request, model=server.model, response_format=server.response_format)
            return Served(request, await client.speak(request.id, body, "synth", started))

        tasks = [asyncio.ensure_future(one(r)) for r in todo]
        try:
            for finished in asyncio.as_completed(tasks):
                served = await finished
                rid = served.request.id
                row = manifest_row(served.reply.outcome(served.request, served.request.seed), outdir.names[rid])
                outdir.record(rid, row, served.reply.pcm, served.reply.sample_rate)
                if on_result:
                    on_result(served)
                check_interrupted()  # a signal whose exception the audio encoder swallowed
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def synthesize_remote(
    requests_path: Path,
    out: Path,
    server: ServerOptions,
    *,
    audio_format: str = "wav",
    dry_run: bool = False,
    force: bool = False,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[Served], None] | None = None,
    on_retry: Callable[[Retry], None] | None = None,
    allow_dropped_fields: bool = False,
    on_warning: Callable[[str], None] | None = None,
) -> SynthSummary:
    """Check the requests and the output directory, then synthesise what an earlier run of the
    same command did not finish. `dry_run` stops after the checks; nothing is sent or written."""
    OutputDir.check(out, audio_format)
    requests, dropped = read_for_server(requests_path, allow_dropped_fields)
    for warning in dropped:
        if on_warning:
            on_warning(f"sent although vllm-omni drops it: {warning}")
    outdir = OutputDir(out, audio_format, [r.id for r in requests], requests_path)
    done = outdir.plan({r.id: remote_fingerprint(r, server, audio_format) for r in requests}, force)
    summary = dict(
        frame_budget=sum(r.max_new_frames or 0 for r in requests),
        orphans=outdir.orphans,
        other_formats=outdir.other_formats,
        server=server.public_url,
        resumed=len(done),
    )
    if dry_run:
        # The server seeds the requests that carry no seed of their own.
        sources = dict(Counter("request" if r.seed is not None else "server" for r in requests))
        return SynthSummary(
            len(requests), 0.0, 0.0, out, None, list(done.values()), dry_run=True, seed_sources=sources, **summary
        )
    todo = [r for r in requests if r.id not in done]  # the folder appears with the first answer
    if on_start:
        on_start(len(requests), len(done))
    start = time.perf_counter()
    try:
        with interrupts_as_exceptions():
            asyncio.run(_send_all(todo, server, outdir, on_result, on_retry))
    except (KeyboardInterrupt, MossError):
        if outdir.rows:  # what finished stays, and the same command resumes; no answer: nothing written
            outdir.write_manifest()
        raise
    wall = time.perf_counter() - start
    manifest, ordered = outdir.write_manifest()
    sources = dict(Counter(row["seed_source"] for row in ordered))
    return SynthSummary(
        len(ordered),
        sum(row["duration_s"] for row in ordered),
        wall,
        out,
        manifest,
        ordered,
        seed_sources=sources,
        **summary,
    )
