"""`moss serve`: vllm-omni's speech API (`POST /v1/audio/speech`) served by moss's engine."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from . import numbers
from .common import stderr, stdout, user_errors
from .options import ENGINE_OPTIONS, synth_options, with_options

# moss's `serve` extra, said one way everywhere (README, docs/serve.md): in a clone, the set-up script; an
# installed moss, its own pinned source again with the extra.
INSTALL = (
    "in a clone, bash scripts/setup.sh --serve; where moss was installed from a pinned source, install that "
    'source again with the extra: pip install "moss-tts-repro[serve] @ git+<repository>@<commit>"'
)
API_KEY_ENV = "MOSS_API_KEY"  # as vLLM's VLLM_API_KEY


Host = Annotated[str, typer.Option(help="Address to listen on (0.0.0.0: every interface).")]
Port = Annotated[int, typer.Option(callback=numbers.PORT, help="Port to listen on.")]
AllowedMediaDir = Annotated[
    Optional[Path],
    typer.Option(help="Let ref_audio name files (paths or file:// URIs) inside this folder; others are refused."),
]
AccessLog = Annotated[bool, typer.Option(help="Log every HTTP request (uvicorn's access log).")]
MaxQueue = Annotated[
    Optional[int],
    typer.Option(
        callback=numbers.QUEUE,
        help="Requests that may wait for a place in the batch; past them the answer is 503 with Retry-After "
        "(default: no bound).",
    ),
]
RequestTimeout = Annotated[
    Optional[float],
    typer.Option(
        callback=numbers.SECONDS,
        help="Seconds a request may take; one still unfinished then is cancelled, frees its place in the "
        "batch and gets a 504 (a stream is cut) (default: no limit).",
    ),
]
ApiKey = Annotated[
    Optional[str],
    typer.Option(
        envvar=API_KEY_ENV,
        show_envvar=True,
        help="Require 'Authorization: Bearer KEY' on every route but /health (401 without it); the key is "
        "never printed or reported.",
    ),
]


@with_options(ENGINE_OPTIONS)
def serve(
    ctx: typer.Context,
    host: Host = "127.0.0.1",
    port: Port = 8091,
    allowed_media_dir: AllowedMediaDir = None,
    access_log: AccessLog = False,
    max_queue: MaxQueue = None,
    request_timeout: RequestTimeout = None,
    api_key: ApiKey = None,
) -> None:
    """Serve the OpenAI-compatible speech API: one engine, every request joins its running batch.

    Routes: POST /v1/audio/speech (one body; with stream true, server-sent events; with stream_format
    audio, raw audio chunks); POST /v1/audio/speech/batch (items in one call); WebSocket
    /v1/audio/speech/stream (text in chunks, audio per utterance); GET /v1/models; GET
    /moss/environment (what the engine computes with); GET /health (never needs --api-key).

    SIGTERM or Ctrl-C stops accepting, finishes the requests in flight, and exits 0. Exit 2: bad
    options or config, the port is taken, or FastAPI/uvicorn are not installed."""
    _need_the_serve_extra()
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


def _need_the_serve_extra() -> None:
    """Exit 2, saying how to install them, where FastAPI or uvicorn is missing."""
    try:
        import fastapi  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as e:
        message = escape(f"moss serve needs its serve extra, FastAPI and uvicorn ({e}): {INSTALL}")
        stderr.print(f"[bold red]error:[/] {message}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
