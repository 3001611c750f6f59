"""`moss serve` as a process: load the models, start the engine thread, listen, and on SIGTERM or
Ctrl-C stop accepting, let every request in flight finish, then stop the engine and return."""

from __future__ import annotations

import errno
import logging
import signal
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import MossError
from ..pipeline import Synthesizer, SynthOptions
from ..pipeline.live import LiveEngine
from .requests import Intake, Limits

TINY_NAME = "moss-tts-local-tiny"
ENGINE_STOP_S = 600.0  # after the last response the engine has nothing left; this only bounds a hang


@dataclass
class Serving:
    """Everything a server runs on (tests start it in-process; `moss serve` in its main thread)."""

    synth: Synthesizer
    engine: LiveEngine
    intake: Intake
    api_key: str | None = None  # required as `Authorization: Bearer <key>` on every route but /health
    request_timeout_s: float | None = None  # a request still unfinished after this is cancelled

    @property
    def app(self):
        from .app import create_app

        return create_app(self.engine, self.intake, self.api_key, self.request_timeout_s)

    def start(self) -> Serving:
        """Load the models and start the engine thread."""
        self.engine.start()
        return self

    def ready(self, host: str, port: int) -> str:
        """The line that says the server is up: what it serves, on what, how, and where."""
        options = self.synth.options
        mode = (
            f"batch-invariant, {self.synth.layout.steps}"
            if options.batch_invariant
            else "fast (batch-dependent rounding)"
        )
        mode += ", legacy global RNG" if options.legacy_global_rng else ""
        mode += ", API key required" if self.api_key else ""
        return (
            f"moss serve: {self.intake.model_name} on {self.synth.device} ({mode}), max batch {self.engine.max_batch}, "
            f"listening on http://{host}:{port}"
        )

    def close(self, timeout: float | None = ENGINE_STOP_S) -> bool:
        stopped = self.engine.close(timeout)
        self.intake.close()
        return stopped


def model_name(options: SynthOptions) -> str:
    """What /v1/models lists and a body's `model` must match: the checkpoint's folder name."""
    return TINY_NAME if options.model is None else Path(options.model).resolve().name


def prepare(
    options: SynthOptions,
    *,
    allowed_media_dir: Path | None = None,
    limits: Limits | None = None,
    api_key: str | None = None,
    max_queue: int | None = None,
    request_timeout_s: float | None = None,
) -> Serving:
    """Check the options, deploy config and checkpoint configs, as `moss synth` does (MossError:
    exit 2); no weights load yet, so a bad option or a taken port fails fast."""
    if allowed_media_dir is not None and not allowed_media_dir.is_dir():
        raise MossError("is not a directory", file=allowed_media_dir, field="--allowed-media-dir")
    synth = Synthesizer(options)  # the same checks and warnings as `moss synth`
    # Every request is decoded chunk by chunk as it is generated, whether its client streams or not:
    # one engine run serves both (in batch-invariant mode the streamed PCM is the offline PCM).
    engine = LiveEngine(synth, max_batch=options.max_batch, stream=True, max_queue=max_queue)
    intake = Intake(
        synth, limits or Limits.of(synth), model_name=model_name(options), allowed_media_dir=allowed_media_dir
    )
    if api_key is not None and not api_key.strip():
        raise MossError("is empty; give a key, or leave the option out to serve without one", field="--api-key")
    if request_timeout_s is not None and not request_timeout_s > 0:
        raise MossError(f"must be > 0 seconds, got {request_timeout_s}", field="--request-timeout")
    return Serving(synth, engine, intake, api_key, request_timeout_s)


def listen(host: str, port: int) -> socket.socket:
    """The listening socket, bound before uvicorn starts, so a taken port is a clear error (exit 2)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
    except OSError as e:  # not an IP address, nor a name this machine resolves (e.g. 256.1.1.1)
        raise MossError(f"cannot listen on {host!r}: not an address ({e.strerror or e})", field="--host") from None
    try:
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        wrong = "--host" if e.errno == errno.EADDRNOTAVAIL else "--port"  # an address of another machine
        raise MossError(f"cannot listen on {host}:{port} ({e.strerror or e})", field=wrong) from None
    sock.set_inheritable(True)
    return sock


def run(serving: Serving, sock: socket.socket, *, access_log: bool = False, on_ready: Callable[[], None] | None = None):
    """Serve until SIGTERM or Ctrl-C, then finish what is in flight and stop the engine."""
    import uvicorn

    config = uvicorn.Config(
        serving.app,
        log_level="info" if access_log else "warning",
        access_log=access_log,
        timeout_graceful_shutdown=None,  # in-flight requests finish, however long they take
        lifespan="off",
    )
    server = uvicorn.Server(config)

    # uvicorn shuts down gracefully on SIGTERM/SIGINT and then re-raises the signal to the handlers
    # it found. These ask for the same shutdown: before uvicorn has its own handlers (a signal while
    # it starts) that is what they do; after, they make the re-raise harmless, and the exit is 0.
    def stop(*_) -> None:
        server.should_exit = True

    quiet = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_ready is not None:
            on_ready()
        server.run(sockets=[sock])
    finally:
        for sig, handler in quiet.items():
            signal.signal(sig, handler)
        serving.close()
        logging.getLogger("moss.serve").info("stopped")
