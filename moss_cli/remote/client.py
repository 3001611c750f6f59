"""Sending speech requests to a server: bounded concurrency, a timeout per request, re-sends
after 5xx answers and reset connections (each one reported through `on_retry`, never silently),
and errors that name the request, where it was sent from and the HTTP status.

Every failure is a `ServerError` (a MossError: exit 2). Header values and URL credentials are
blanked out of every message (`ServerOptions.redact`)."""

from __future__ import annotations

import ast
import asyncio
import itertools
import re
import time
from dataclasses import dataclass
from typing import Any, Awaitable, Callable, Iterable

import httpx

from .. import speech_api
from ..errors import MossError
from .reply import NotAudio, Reply, decode_audio, moss_headers
from .settings import DEFAULT_PCM_CHANNELS, DEFAULT_PCM_RATE, ServerOptions

BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # before re-send 1, 2, ...; the last repeats
MAX_RETRY_AFTER_S = 60.0  # a server's Retry-After is honoured up to this
_BODY_ENCODING = ("content-encoding", "content-length", "transfer-encoding")  # of a body read piece by piece


class ServerError(MossError):
    """A request the server did not answer with audio."""

    def __init__(self, message: str, *, request: str | None = None, status: int | None = None) -> None:
        super().__init__(message, field="--server")
        self.request = request
        self.status = status


@dataclass(frozen=True)
class Retry:
    """One re-send: which request, from where, which attempt follows, and why."""

    request: str
    context: str
    attempt: int  # the attempt about to be made (2 = the first re-send)
    reason: str

    def as_dict(self) -> dict:
        return dict(self.__dict__)

    @property
    def message(self) -> str:
        return f"{self.reason}; sending it again (attempt {self.attempt})"


class _Transient(Exception):
    """A failure a re-send may cure (5xx, a reset connection); the message is already redacted."""

    def __init__(self, message: str, status: int | None, retry_after_s: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s  # the server's Retry-After, where it said when


def _retry_after(response: httpx.Response) -> float | None:
    """Seconds a 503 (or 429) asks to wait before the next try (Retry-After as a number), or None."""
    value = response.headers.get("retry-after", "").strip()
    try:
        return max(float(value), 0.0) if value else None
    except ValueError:  # an HTTP date: fall back to the client's own backoff
        return None


# vLLM's media loader refuses a file:// URL on a server started without --allowed-local-media-path
# with a RuntimeError (vllm/multimodal/media/connector.py:408-427, MediaConnector._load_file_url), and
# one outside that folder with a ValueError. vllm-omni's MOSS adapter loads ref_audio through it
# (tts_adapters/moss_tts.py:347, 84-121; serving_speech.py:1298-1352): the single route answers the
# first a 500 "Speech generation failed: ..." (serving_speech.py:2720-2733), the second a 400
# (2700-2709), and the batch route makes either the item's error (2790-2802). No re-send changes that.
LOCAL_MEDIA_OPTION = "--allowed-local-media-path"


def server_setting(words: str) -> str | None:
    """What to change where a server's error (`words`) is one of its settings refusing the request,
    not a fault a re-send can cure; None for any other error."""
    if LOCAL_MEDIA_OPTION not in words:
        return None
    return (
        "That is a setting of the server, not a fault of this request: vllm-omni reads a file:// ref_audio "
        f"only from inside the folder its {LOCAL_MEDIA_OPTION} names, and refuses local files without it. "
        f"Start vllm-omni with {LOCAL_MEDIA_OPTION} DIR (a folder holding the reference files), or send the "
        "reference as a data: URL (what moss sends for a request file's ref_audio path or file:// URI) or as "
        "an http(s) URL the server can fetch"
    )


def _error_message(response: httpx.Response) -> str:
    """The server's own words: an OpenAI-style `{"error": {"message": ...}}`, else the body's start.
    vLLM's schema error (type "Bad Request", a dump of pydantic's errors) is read as `field: msg`."""
    try:
        body = response.json()
        error = body.get("error") if isinstance(body, dict) else None
        if isinstance(error, dict) and error.get("message"):
            param = f" [{error['param']}]" if error.get("param") else ""
            return f"{_schema_words(error) or error['message']}{param}"
        if isinstance(body, dict) and "detail" in body:  # FastAPI's default error shape
            return str(body["detail"])
    except ValueError:
        pass
    return _first_line(response.text)


_STRING = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""  # a Python string literal, as repr() writes one
_LOC_MSG = re.compile(rf"'loc': (\([^)]*\)|{_STRING}), 'msg': ({_STRING})")  # in a pydantic error dict's str()


def _schema_words(error: dict) -> str | None:
    """vLLM's answer to a body its request model refuses (type "Bad Request", the message "N
    validation error(s):" then each pydantic error dict on a line: vLLM 0.30's
    exception_handling/handlers/validation.py) as `field: msg; ...`; None for any other error."""
    lines = str(error["message"]).splitlines()
    if error.get("type") != "Bad Request" or not lines or not re.fullmatch(r"\d+ validation errors?:", lines[0]):
        return None
    parts = []
    for found in filter(None, map(_LOC_MSG.search, lines[1:])):
        loc, msg = (ast.literal_eval(literal) for literal in found.groups())  # literals only: safe
        names = loc.split(".") if isinstance(loc, str) else loc
        where = ".".join(str(name) for name in names if name != "body")
        parts.append(f"{where}: {msg}" if where else str(msg))
    return "; ".join(parts) or None


def _first_line(body: str, limit: int = 120) -> str:
    """A body that is not the API's error JSON (a proxy's or a plain web server's HTML page),
    quoted by its first line of text only."""
    text = re.sub(r"(?is)<(head|script|style)\b.*?</\1\s*>|<[^>]*>", "\n", body)
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return "(empty body)"
    more = len(line) > limit or text.strip() != line
    return repr(line[:limit]) + (" (first line of the body)" if more else "")


class SpeechClient:
    """Use as `async with SpeechClient(options) as client:`; `speak` may run concurrently."""

    def __init__(self, options: ServerOptions, on_retry: Callable[[Retry], None] | None = None) -> None:
        self.options = options
        self.on_retry = on_retry
        self.retries: list[Retry] = []
        self.sent = 0  # HTTP requests made, re-sends included
        self._slots = asyncio.Semaphore(options.concurrency)
        self._active: dict[int, int] = {}  # a request in flight -> the most in flight while it was
        self._ids = itertools.count()
        self._http: httpx.AsyncClient | None = None

    async def __aenter__(self) -> SpeechClient:
        limit = self.options.concurrency
        self._http = httpx.AsyncClient(
            base_url=self.options.base_url,
            params=httpx.QueryParams(self.options.query),
            headers=dict(self.options.headers),
            timeout=httpx.Timeout(self.options.timeout_s),
            limits=httpx.Limits(max_connections=limit, max_keepalive_connections=limit),
        )
        return self

    async def __aexit__(self, *exc) -> None:
        await self._http.aclose()

    def _fail(self, message: str, request: str | None = None, status: int | None = None) -> ServerError:
        return ServerError(self.options.redact(message), request=request, status=status)

    async def models(self) -> list[str] | None:
        """The ids `GET /v1/models` lists, or None when the server has no such endpoint."""
        listed = await self._document(speech_api.MODELS_PATH)
        data = listed.get("data", []) if isinstance(listed, dict) else None
        return [str(m.get("id")) for m in data if isinstance(m, dict)] if isinstance(data, list) else None

    async def environment(self) -> dict | None:
        """What `moss serve` reports of its engine (`GET /moss/environment`: torch, device, dtype,
        threads, checkpoints, deploy), or None from a server without that endpoint (vllm-omni)."""
        reported = await self._document(speech_api.ENVIRONMENT_PATH)
        return reported if isinstance(reported, dict) else None

    async def _document(self, path: str):
        """The JSON a `GET path` answers with, or None when it answers no 200 JSON (no such
        endpoint); a server that cannot be reached is an error."""
        try:
            response = await self._http.get(path)
        except httpx.HTTPError as e:
            raise self._fail(f"{self._where(path)}: {self._describe(e)}") from None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except ValueError:
            return None

    def _where(self, path: str) -> str:
        return f"{self.options.public_url}{path}"

    def _describe(self, error: httpx.HTTPError) -> str:
        if isinstance(error, httpx.ConnectError):
            return f"cannot connect ({error or 'connection refused'}); is the server running and listening there?"
        if isinstance(error, httpx.TimeoutException):
            return f"no answer within {self.options.timeout_s:g} s (--timeout)"
        return f"{type(error).__name__}: {error}"

    async def speak(
        self, request: str, body: dict[str, Any], context: str, started: float | None = None, *, timed: bool = False
    ) -> Reply:
        """Send one request (re-sending on transient failures) and decode its audio. `timed`: read the
        body piece by piece as it arrives and keep when each came (`Reply.arrivals`), for a stream's
        time to first audio and continuity."""
        async with self._slots:
            key = next(self._ids)
            self._active[key] = 0
            self._note_in_flight()
            begin = time.perf_counter()
            try:
                reply = await self._attempts(request, body, context, timed)
            finally:
                in_flight = self._active.pop(key)
        reply.sent_s = begin - (started if started is not None else begin)
        reply.wall_s = time.perf_counter() - begin
        reply.in_flight = in_flight
        return reply

    def _note_in_flight(self) -> None:
        count = len(self._active)
        for key, most in self._active.items():
            self._active[key] = max(most, count)

    async def _attempts(self, request: str, body: dict[str, Any], context: str, timed: bool = False) -> Reply:
        attempt = 1
        while True:
            try:
                reply = await self._once(request, body, context, timed)
                reply.attempts = attempt
                return reply
            except _Transient as e:
                if attempt > self.options.retries:
                    more = f" (after {attempt} attempts)" if attempt > 1 else ""
                    raise self._fail(f"{e}{more}", request, e.status) from None
                attempt += 1
                retry = Retry(request, context, attempt, str(e))
                self.retries.append(retry)
                if self.on_retry is not None:
                    self.on_retry(retry)
                backoff = BACKOFF_S[min(attempt - 2, len(BACKOFF_S) - 1)]
                await asyncio.sleep(min(e.retry_after_s, MAX_RETRY_AFTER_S) if e.retry_after_s is not None else backoff)

    async def _once(self, request: str, body: dict[str, Any], context: str, timed: bool = False) -> Reply:
        what = f"request {request!r} ({context}) to {self._where(speech_api.SPEECH_PATH)}"
        self.sent += 1
        arrivals: list[tuple[float, int]] | None = [] if timed else None
        try:
            response = await self._post(body, arrivals)
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _Transient(self.options.redact(f"{what}: connection lost ({type(e).__name__}: {e})"), None) from None
        except httpx.HTTPError as e:
            raise self._fail(f"{what}: {self._describe(e)}", request) from None
        status = response.status_code
        if status >= 400:
            words = _error_message(response)
            message = f"{what}: HTTP {status} {response.reason_phrase}: {words}"
            if (setting := server_setting(words)) is not None:  # the same answer to every re-send
                raise self._fail(f"{message.rstrip('.')}. {setting}", request, status)
            if status >= 500:
                raise _Transient(self.options.redact(message), status, _retry_after(response))
            raise self._fail(message, request, status)
        headers = moss_headers(response.headers)
        # Raw PCM says nothing of its layout: the server's headers where sent, else the options.
        rate = _positive(headers.get(speech_api.HEADER_SAMPLE_RATE)) or self.options.sample_rate or DEFAULT_PCM_RATE
        channels = _positive(headers.get(speech_api.HEADER_CHANNELS)) or self.options.channels or DEFAULT_PCM_CHANNELS
        try:
            pcm, rate = decode_audio(
                response.content,
                str(body.get("response_format", self.options.response_format)),
                response.headers.get("content-type", ""),
                sample_rate=rate,
                channels=channels,
            )
        except NotAudio as e:
            fmt = body.get("response_format", self.options.response_format)
            raise self._fail(f"{what}: HTTP {status}, but the body is not {fmt} audio: {e}", request, status) from None
        return Reply(request, context, pcm, rate, headers, arrivals=arrivals)

    async def _post(self, body: dict[str, Any], arrivals: list[tuple[float, int]] | None) -> httpx.Response:
        """POST a speech request; with `arrivals`, read the body as it comes and append (seconds
        since sending, bytes received so far) for every piece."""
        if arrivals is None:
            return await self._http.post(speech_api.SPEECH_PATH, json=body)
        sent, pieces = time.perf_counter(), []
        async with self._http.stream("POST", speech_api.SPEECH_PATH, json=body) as response:
            async for piece in response.aiter_bytes():
                if piece:
                    pieces.append(piece)
                    arrivals.append((time.perf_counter() - sent, (arrivals[-1][1] if arrivals else 0) + len(piece)))
        # The whole body, already decoded, as the plain post would have given it.
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_ENCODING]
        return httpx.Response(response.status_code, headers=kept, content=b"".join(pieces), request=response.request)


def _positive(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


async def all_or_nothing(jobs: Iterable[Awaitable]) -> list:
    """Await every job concurrently; on the first failure cancel the others and raise it."""
    tasks = [asyncio.ensure_future(job) for job in jobs]
    try:
        return list(await asyncio.gather(*tasks))
    except BaseException:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
