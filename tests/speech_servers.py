"""Small speech servers for the client tests: test doubles of the server side only.

They speak the speech API's shape (`POST /v1/audio/speech` with `input`, `seed`, `max_new_tokens`,
`response_format`; OpenAI-style JSON errors) and answer with real audio: a tone whose pitch comes
from the text plus noise drawn from a seed, 1920 samples per frame at 24 kHz (12.5 frames/s).
Each behaviour is one way a real server can be wrong, so the audit's verdicts and the client's
errors can be checked without a model. Each server runs in a thread on 127.0.0.1, on a socket
bound to a free port before it starts, and stops within a bounded wait.
"""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import socket
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import soundfile as sf
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

RATE = 24_000
FRAME = 1920
DEPLOY_SEED = 42


@dataclass
class Behaviour:
    seeds: str = "honour"  # honour | ignore (every request as if seed 42) | no-deploy-seed (unseeded: fresh noise)
    batch_dependent: bool = False  # the noise changes when other requests are in flight
    batch_rounding: bool = False  # the last bit of some samples changes when other requests are in flight
    moss_headers: bool = False  # send x-moss-* headers like moss serve (else none, like vllm-omni)
    hold_s: float = 0.05  # how long a request stays in flight
    status: int | None = None  # answer every request with this error status
    error: dict | None = None  # with `status`: the error answered ({"message", "type", "param"}), e.g. vllm-omni's
    fail_first: int = 0  # the first N requests get 503, the rest are served (a flaky server)
    fail_from: int | None = None  # requests from the N-th on get 500 (a server that breaks mid-job)
    json_200: bool = False  # answer 200 with a JSON body instead of audio
    token: str | None = None  # required `Authorization: Bearer <token>`; a wrong one is echoed back
    refuse_ref_audio: bool = False
    deploy_seed_elsewhere: bool = False  # unseeded requests draw from another stream than an explicit seed 42
    rebuilt: bool = False  # another build of the same server: every answer a last bit off, whatever the batch
    # A response cache keyed on the frame budget alone: every request is answered with the audio of the
    # first one served with its max_new_tokens, alone or in flight with others, whatever its text, seed
    # or voice. Byte-stable in every composition, and every request after the first gets the first's audio.
    cache_by_budget: bool = False
    cache_rounding: bool = False  # with it, other texts get the cached audio a last bit off: nearly the first's
    seen: list[dict] = field(default_factory=list)  # bodies received
    headers_seen: list[dict] = field(default_factory=list)
    queries_seen: list[str] = field(default_factory=list)


def _error(status: int, message: str, param: str | None = None) -> JSONResponse:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return JSONResponse(
        {"error": {"message": message, "type": kind, "param": param, "code": status}}, status_code=status
    )


def synthesize(text: str, seed: int | None, frames: int, noisy: bool = True) -> np.ndarray:
    """int16 [samples, 1]: a tone from the text, plus noise from the seed (None: fresh noise)
    unless decoding is greedy."""
    pitch = 150 + int(hashlib.sha256(text.encode()).hexdigest()[:4], 16) % 300
    t = np.arange(frames * FRAME) / RATE
    audio = 0.3 * np.sin(2 * np.pi * pitch * t)
    if noisy:
        audio = audio + 0.02 * np.random.default_rng(seed).standard_normal(t.shape[0])
    return np.clip(np.rint(audio * 32767), -32768, 32767).astype("<i2")[:, None]


def make_app(behaviour: Behaviour) -> FastAPI:
    app = FastAPI()
    active: dict[int, int] = {}
    counter = iter(range(10**9))
    cached: dict[object, tuple[str, np.ndarray]] = {}  # max_new_tokens -> the first (text, audio) made for it

    @app.get("/health")
    async def health():
        return {"status": "ok"}

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "fake-tts", "object": "model"}]}

    @app.post("/v1/audio/speech")
    async def speech(request: Request):
        body = await request.json()
        behaviour.seen.append(body)
        behaviour.headers_seen.append(dict(request.headers))
        behaviour.queries_seen.append(request.url.query)
        number = next(counter)
        if behaviour.token is not None:
            given = request.headers.get("authorization", "")
            if given != f"Bearer {behaviour.token}":
                return _error(401, f"bad credentials {given!r}")  # echoes the value: the client must blank it
        if behaviour.status is not None and behaviour.error is not None:
            return JSONResponse({"error": {**behaviour.error, "code": behaviour.status}}, status_code=behaviour.status)
        if behaviour.status is not None:
            return _error(behaviour.status, f"the fake server answers {behaviour.status}")
        if behaviour.fail_from is not None and number >= behaviour.fail_from:
            return _error(500, "the fake server broke")
        if number < behaviour.fail_first:
            return _error(503, "warming up, try again")
        if behaviour.json_200:
            return JSONResponse({"text": "not audio"})
        if behaviour.refuse_ref_audio and "ref_audio" in body:
            return _error(400, "this server takes no reference audio", "ref_audio")
        if not isinstance(body.get("input"), str):
            return _error(422, "missing 'input'", "input")
        key = number
        active[key] = len(active) + 1
        for k in active:
            active[k] = max(active[k], len(active))
        await asyncio.sleep(behaviour.hold_s)
        in_flight = active.pop(key)
        seed, source = body.get("seed"), "request"
        if behaviour.seeds == "ignore" or seed is None:
            seed, source = DEPLOY_SEED, "deploy"
        if behaviour.seeds == "no-deploy-seed" and "seed" not in body:
            seed, source = None, "none"
        drawn = seed
        if behaviour.deploy_seed_elsewhere and "seed" not in body:
            drawn = DEPLOY_SEED + 7  # reports seed 42, samples with another
        if behaviour.batch_dependent and in_flight > 1 and seed is not None:
            drawn += 1000  # what a batch-coupled random stream looks like from outside
        frames = int(body.get("max_new_tokens") or 20)
        # moss serve honours audio_temperature 0 (greedy); a server without its headers drops it, as vllm-omni does.
        greedy = behaviour.moss_headers and body.get("audio_temperature") == 0
        pcm = synthesize(body["input"], drawn, frames, noisy=not greedy)
        if behaviour.cache_by_budget:
            text, first = cached.setdefault(body.get("max_new_tokens"), (body["input"], pcm))
            pcm = first.copy()
            if behaviour.cache_rounding and text != body["input"]:
                pcm[::97] ^= 1
        if behaviour.batch_rounding and in_flight > 1:
            pcm[::97] ^= 1  # what batch-dependent kernel rounding looks like in the audio
        if behaviour.rebuilt:
            pcm[::89] ^= 1  # other kernels, the same for every batch: only a baseline can tell
        headers = {}
        if behaviour.moss_headers:
            headers = {
                "x-moss-seed": "none" if seed is None else str(seed),
                "x-moss-seed-source": source,
                "x-moss-frames": str(frames),
                "x-moss-codes-sha256": hashlib.sha256(pcm.tobytes()).hexdigest(),
                "x-moss-max-in-flight": str(in_flight),
                "x-moss-stop-reason": "max_frames",
                "x-moss-sample-rate": str(RATE),
                "x-moss-channels": "1",
            }
        fmt = body.get("response_format", "wav")
        if fmt == "pcm":
            return Response(pcm.tobytes(), media_type="audio/pcm", headers=headers)
        buffer = io.BytesIO()
        sf.write(buffer, pcm, RATE, subtype="PCM_16", format=fmt.upper())
        return Response(buffer.getvalue(), media_type=f"audio/{fmt}", headers=headers)

    return app


def free_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    return sock


def unused_port() -> int:
    """A port nothing listens on (for connection-refused tests)."""
    with free_socket() as sock:
        return sock.getsockname()[1]


@contextmanager
def serving_app(app, *, lifespan: str = "off", start_timeout: float = 10.0) -> Iterator[str]:
    """Run an ASGI app with uvicorn in a thread on 127.0.0.1 (a port bound before it starts); yield
    its base URL; stop it within a bounded wait on exit."""
    sock = free_socket()
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan=lifespan, timeout_graceful_shutdown=2))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout
    try:
        while not server.started:
            if time.monotonic() > deadline or not thread.is_alive():
                raise RuntimeError("the test server did not start")
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextmanager
def serving(behaviour: Behaviour, start_timeout: float = 10.0) -> Iterator[str]:
    """Run a fake server in a thread; yield its base URL; stop it on exit."""
    with serving_app(make_app(behaviour), start_timeout=start_timeout) as url:
        yield url


@contextmanager
def socket_server(answer: Callable[[socket.socket, threading.Event], None]) -> Iterator[str]:
    """A server on a raw socket of 127.0.0.1: `answer(conn, stop)` handles each connection, in a thread of
    its own, until `stop` is set; yields the base URL; on exit stops accepting and sets `stop` (an answer
    that writes on, to a client that has gone, ends with the OSError of its write)."""
    sock = free_socket()
    sock.listen(16)
    sock.settimeout(0.1)
    stop = threading.Event()

    def serve_one(conn: socket.socket) -> None:
        with conn:
            try:
                answer(conn, stop)
            except OSError:  # the client went away
                pass

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = sock.accept()
            except OSError:
                continue
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(timeout=5)
        sock.close()


@contextmanager
def resetting(start_timeout: float = 5.0) -> Iterator[str]:
    """A server that accepts each connection, reads the request and closes without answering (a
    reset connection, as a crashing worker or a proxy gives), except a GET (the client's probe),
    answered 404: no such endpoint."""

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        conn.settimeout(start_timeout)
        if conn.recv(65536).startswith(b"GET "):
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")

    with socket_server(answer) as url:
        yield url


@contextmanager
def silent() -> Iterator[str]:
    """A server that takes connections and never answers (a hung process): the socket listens, so
    the system completes each connection, and nothing ever reads or writes on it."""
    with free_socket() as sock:
        sock.listen(64)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@contextmanager
def plain_web_server() -> Iterator[str]:
    """Python's own HTTP server, which answers POST with 501 and an HTML page (a URL that points at
    some other web server)."""
    from http.server import BaseHTTPRequestHandler

    class Quiet(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

    with http_server(Quiet) as url:
        yield url


@contextmanager
def http_server(handler, on_stop: Callable[[], None] = lambda: None) -> Iterator[str]:
    """Python's own threading HTTP server on 127.0.0.1 with `handler`; yields its base URL; on exit
    `on_stop()` (to release handlers that wait), then shuts it down within a bounded wait. A client that
    hung up mid-answer is no error of the server's: no traceback."""
    from http.server import ThreadingHTTPServer

    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    server.handle_error = lambda *args: None
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        on_stop()
        server.shutdown()
        thread.join(timeout=5)
        server.server_close()


# What an HTTP/1.0 speech server (on Python's http.server) answers the WebSocket upgrade with: every
# way an upgrade fails that a client cannot read as a WebSocket server's refusal, as an older server,
# a proxy that drops `Upgrade`, or a TLS terminator speaking HTTP/1.0 gives.
UPGRADE_ANSWERS = {
    "http/1.0 404": None,  # http.server's own answer to an unknown path
    "426": b"HTTP/1.1 426 Upgrade Required\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    "400": b"HTTP/1.1 400 Bad Request\r\nContent-Length: 11\r\nConnection: close\r\n\r\nbad request",
    "closed": b"",
    "101 without upgrade": b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\n\r\n",
    "http/1.0 200 page": b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>a page</html>",
}


@contextmanager
def http10_speech_server(
    upgrade: str = "http/1.0 404",
    die_after: int | None = None,
    hang_after: int | None = None,
    served: list | None = None,
) -> Iterator[str]:
    """A speech server on Python's http.server, answering in HTTP/1.0 as it does: `POST
    /v1/audio/speech` with a WAV (the text's tone, noise from the seed, the deploy seed 42 for an
    unseeded request; `stream` and `stream_format` ignored, as an older server ignores fields it lacks),
    every other path its own HTML 404, and the WebSocket upgrade as `UPGRADE_ANSWERS[upgrade]` says.
    `die_after`: from that POST on the connection is closed unanswered (a server that died); `hang_after`:
    from that POST on nothing is answered until the server stops (a hung server). `served` gets the body
    of every POST answered."""
    from http.server import BaseHTTPRequestHandler

    posts = iter(range(10**9))
    stopping = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            answer = UPGRADE_ANSWERS[upgrade] if self.headers.get("upgrade") else None
            if answer is None:
                self.send_error(404)
                return
            self.wfile.write(answer)
            self.close_connection = True

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)) or b"{}")
            number = next(posts)
            if hang_after is not None and number >= hang_after:
                stopping.wait()
                return
            if die_after is not None and number >= die_after:
                self.close_connection = True
                return
            if self.path.split("?")[0] != "/v1/audio/speech" or not isinstance(body.get("input"), str):
                self.send_error(404)
                return
            seed = body.get("seed", DEPLOY_SEED)
            pcm = synthesize(body["input"], seed, int(body.get("max_new_tokens") or 20))
            buffer = io.BytesIO()
            sf.write(buffer, pcm, RATE, subtype="PCM_16", format="WAV")
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(buffer.getvalue())))
            self.end_headers()
            self.wfile.write(buffer.getvalue())
            if served is not None:
                served.append(body)

    with http_server(Handler, on_stop=stopping.set) as url:
        yield url


# A hostile or broken server's answer to every POST (GETs, the client's probe, get a 404): each is one way a
# server can hold a client forever, or grow it without bound, unless the client bounds the answer.
_WAV_STREAM_HEADER = (
    b"RIFF\xff\xff\xff\xffWAVEfmt \x10\x00\x00\x00\x01\x00\x01\x00\xc0\x5d\x00\x00\x80\xbb\x00\x00\x02\x00\x10\x00"
    b"data\xff\xff\xff\xff"
)
HOSTILE = (
    "endless-wav",  # 200, a WAV stream's header, then silence as fast as the socket takes it, never ending
    "trickle",  # 200 with Content-Length 2 GB, then a byte a second
    "trickle-chunked",  # 200, chunked, a byte a second, never ending
    "huge-error",  # 400 whose JSON error message is 50 MB
    "lying-wav",  # 200 audio/wav whose header claims 2 GB of data, carrying 1,001 bytes of garbage
    "redirect",  # 302 to another address, with a token in its query
    "too-long",  # 200 with a WAV of 100 frames' audio, whatever the request's budget
)


@contextmanager
def hostile(kind: str) -> Iterator[str]:
    """A server on a raw socket that answers every POST as `kind` (HOSTILE) says; each connection in a
    thread of its own, all of them stopped on exit (a write to a client that has gone ends its thread)."""
    assert kind in HOSTILE, kind

    def answer(conn: socket.socket, stop: threading.Event) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            got = conn.recv(65536)
            if not got:
                return
            head += got
        # The whole request is read before any answer: a socket closed with a request's bytes unread resets the
        # connection, which the client would see as a lost connection instead of the answer.
        headers, _, body = head.partition(b"\r\n\r\n")
        length = next((int(v) for k, _, v in (h.partition(b":") for h in headers.split(b"\r\n"))
                       if k.strip().lower() == b"content-length"), 0)  # fmt: skip
        while len(body) < length and (got := conn.recv(65536)):
            body += got
        if head.startswith(b"GET "):
            conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        if kind == "endless-wav":
            conn.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nConnection: close\r\n\r\n" + _WAV_STREAM_HEADER
            )
            while not stop.is_set():
                conn.sendall(bytes(65536))
        elif kind in ("trickle", "trickle-chunked"):
            framing = "Content-Length: 2000000000" if kind == "trickle" else "Transfer-Encoding: chunked"
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\n{framing}\r\n\r\n".encode())
            while not stop.wait(1.0):
                conn.sendall(b"R" if kind == "trickle" else b"1\r\nR\r\n")
        elif kind == "huge-error":
            message = b'{"error": {"message": "' + b"x" * 50_000_000 + b'", "type": "BadRequestError", "code": 400}}'
            conn.sendall(f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: {len(message)}"
                         "\r\nConnection: close\r\n\r\n".encode() + message)  # fmt: skip
        elif kind == "lying-wav":
            body = b"RIFF" + (2**31).to_bytes(4, "little") + b"WAVE" + bytes(range(256)) * 3 + bytes(1001 - 780)
            conn.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )
        elif kind == "redirect":
            conn.sendall(b"HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:9/elsewhere?token=s3cr3t-t0ken\r\n"
                         b"Content-Length: 0\r\n\r\n")  # fmt: skip
        else:  # too-long
            buffer = io.BytesIO()
            sf.write(buffer, synthesize("too long", 1, 100), RATE, subtype="PCM_16", format="WAV")
            body = buffer.getvalue()
            conn.sendall(
                f"HTTP/1.1 200 OK\r\nContent-Type: audio/wav\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
            )

    with socket_server(answer) as url:
        yield url
