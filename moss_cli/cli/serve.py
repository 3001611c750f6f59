"""`moss serve`: vllm-omni's speech API (`POST /v1/audio/speech`) served by moss's engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from . import numbers
from .common import Device, DType, stderr, stdout, user_errors
from .options import (
    AllowForeignDeploy,
    BatchInvariant,
    CodecOption,
    CompileOption,
    DeployOption,
    DeviceOption,
    DTypeOption,
    GraphsOption,
    LayoutOption,
    LegacyGlobalRng,
    MaxBatchOption,
    ModelOption,
    ThreadsOption,
    synth_options,
)

# moss's `serve` extra, said one way everywhere (README, docs/serve.md): in a clone, the set-up script; an
# installed moss, its own pinned source again with the extra.
INSTALL = (
    "in a clone, bash scripts/setup.sh --serve; where moss was installed from a pinned source, install that "
    'source again with the extra: pip install "moss-tts-repro[serve] @ git+<repository>@<commit>"'
)
API_KEY_ENV = "MOSS_API_KEY"  # as vLLM's VLLM_API_KEY


def serve(
    ctx: typer.Context,
    deploy: DeployOption = None,
    allow_foreign_deploy: AllowForeignDeploy = False,
    model: ModelOption = None,
    codec: CodecOption = None,
    host: Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(callback=numbers.PORT, help="Port to listen on.")] = 8091,
    max_batch: MaxBatchOption = None,
    legacy_global_rng: LegacyGlobalRng = False,
    batch_invariant: BatchInvariant = True,
    layout: LayoutOption = "auto",
    allowed_media_dir: Annotated[
        Optional[Path],
        typer.Option(help="Let ref_audio name files (paths or file:// URIs) inside this folder; others are refused."),
    ] = None,
    device: DeviceOption = Device.auto,
    dtype: DTypeOption = DType.auto,
    threads: ThreadsOption = None,
    compile: CompileOption = False,
    graphs: GraphsOption = False,
    access_log: Annotated[bool, typer.Option(help="Log every HTTP request (uvicorn's access log).")] = False,
    max_queue: Annotated[
        Optional[int],
        typer.Option(
            callback=numbers.QUEUE,
            help="Requests that may wait for a place in the batch; past them the answer is 503 with Retry-After "
            "(default: no bound).",
        ),
    ] = None,
    request_timeout: Annotated[
        Optional[float],
        typer.Option(
            callback=numbers.SECONDS,
            help="Seconds a request may take; one still unfinished then is cancelled, frees its place in the "
            "batch and gets a 504 (a stream is cut) (default: no limit).",
        ),
    ] = None,
    api_key: Annotated[
        Optional[str],
        typer.Option(
            envvar=API_KEY_ENV,
            show_envvar=True,
            help="Require 'Authorization: Bearer KEY' on every route but /health (401 without it); the key is "
            "never printed or reported.",
        ),
    ] = None,
) -> None:
    """Serve the OpenAI-compatible speech API: one engine, every request joins its running batch.

    Routes: POST /v1/audio/speech (one body; with stream true, server-sent events; with stream_format
    audio, raw audio chunks); POST /v1/audio/speech/batch (items in one call); WebSocket
    /v1/audio/speech/stream (text in chunks, audio per utterance); GET /v1/models; GET
    /moss/environment (what the engine computes with); GET /health (never needs --api-key).

    SIGTERM or Ctrl-C stops accepting, finishes the requests in flight, and exits 0. Exit 2: bad
    options or config, the port is taken, or FastAPI/uvicorn are not installed."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        message = escape(f"moss serve needs its serve extra, FastAPI and uvicorn ({e}): {INSTALL}")
        stderr.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    with user_errors():
        from ..serve.server import listen, prepare, run  # torch loads here, not for --help

        options = synth_options(ctx.params)
        serving = prepare(
            options,
            allowed_media_dir=allowed_media_dir,
            api_key=api_key,
            max_queue=max_queue,
            request_timeout_s=request_timeout,
        )
        sock = listen(host, port)
        serving.start()
        bound = sock.getsockname()[1]  # the engine's layout is known once it runs: the line is made then
        ready = lambda: stdout.print(serving.ready(host, bound), highlight=False, soft_wrap=True)  # noqa: E731
        run(serving, sock, access_log=access_log, on_ready=ready)
    stdout.print("moss serve: stopped", highlight=False)
