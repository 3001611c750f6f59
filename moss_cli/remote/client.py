"""Sending speech requests to a server: bounded concurrency, a timeout per request, re-sends
after 5xx answers and reset connections (each one reported through `on_retry`, never silently),
and errors that name the request, where it was sent from and the HTTP status.

Every failure is a `ServerError` (a MossError: exit 2). Header values and URL credentials are
blanked out of every message (`ServerOptions.redact`)."""

from __future__ import annotations

import ast
import asyncio
import base64
import itertools
import re
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, AsyncIterator, Awaitable, Callable, Iterable, TypeVar

import httpx
import numpy as np

from .. import speech_api
from ..errors import MossError
from .bounds import ERROR_BYTES, AnswerBounds, shown
from .reply import NotAudio, Reply, decode_audio, item_headers, moss_headers
from .settings import DEFAULT_PCM_CHANNELS, DEFAULT_PCM_RATE, ServerOptions

BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 4.0)  # before re-send 1, 2, ...; the last repeats
MAX_RETRY_AFTER_S = 60.0  # a server's Retry-After is honoured up to this
# The probe's GETs wait this long at most (or --timeout, if shorter): a speech server answers them at
# once, busy or not (they never reach its engine), so a silent one is down or is no speech server.
PROBE_TIMEOUT_S = 10.0
T = TypeVar("T")
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


@dataclass(frozen=True)
class ServerInfo:
    """What a server says of itself before any speech request (`SpeechClient.probe`)."""

    models: list[str] | None  # the ids GET /v1/models lists; None: no such endpoint
    environment: dict | None  # moss serve's GET /moss/environment; None from any other server (vllm-omni)

    @property
    def is_moss_serve(self) -> bool:
        """`moss serve`, the one server with that endpoint: it honours every field of a request file."""
        return self.environment is not None


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
            return f"{shown(_schema_words(error) or str(error['message']))}{param}"
        if isinstance(body, dict) and "detail" in body:  # FastAPI's default error shape
            return shown(str(body["detail"]))
    except (ValueError, RecursionError):
        pass
    return _first_line(response.text)


_STRING = r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\""  # a Python string literal, as repr() writes one
_LOC_MSG = re.compile(rf"'loc': (\([^)]*\)|{_STRING}), 'msg': ({_STRING})")  # in a pydantic error dict's str()


def _schema_words(error: dict) -> str | None:
    """vLLM's answer to a body its request model refuses (type "Bad Request", the message "N
    validation error(s):" then each pydantic error dict on a line: vLLM 0.30's
    exception_handling/handlers/validation.py) as `field: msg; ...`; None for any other error."""
    lines = str(error["message"])[:ERROR_BYTES].splitlines()
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


@dataclass
class Slot:
    """A request's time in flight (`SpeechClient.in_flight`): when it was sent, when it ended and the
    most of this client's requests in flight at once meanwhile."""

    begin: float
    end: float = 0.0
    most: int = 0

    def stamp(self, reply: Reply, started: float | None) -> Reply:
        """`reply` with its times (from `started`, its run's start) and its in-flight count."""
        reply.sent_s = self.begin - (started if started is not None else self.begin)
        reply.wall_s = self.end - self.begin
        reply.in_flight = self.most
        return reply


class SpeechClient:
    """Use as `async with SpeechClient(options) as client:`; `speak` may run concurrently."""

    def __init__(self, options: ServerOptions, on_retry: Callable[[Retry], None] | None = None) -> None:
        self.options = options
        self.on_retry = on_retry
        self.retries: list[Retry] = []
        self.sent = 0  # HTTP requests made, re-sends included
        self.utterances = 0  # WebSocket utterances sent
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

    async def probe(self) -> ServerInfo:
        """What the server says of itself, asked before any speech request by every command that sends
        them: the models it serves (`GET /v1/models`) and, from moss serve only, what its engine
        computes with (`GET /moss/environment`: torch, device, dtype, threads, checkpoints, deploy).
        Each GET waits PROBE_TIMEOUT_S at most, so a server that is down, or that takes connections
        and never answers, is an error within seconds instead of after --timeout."""
        listed = await self._document(speech_api.MODELS_PATH)
        data = listed.get("data", []) if isinstance(listed, dict) else None
        models = [str(m.get("id")) for m in data if isinstance(m, dict)] if isinstance(data, list) else None
        reported = await self._document(speech_api.ENVIRONMENT_PATH)
        return ServerInfo(models, reported if isinstance(reported, dict) else None)

    async def _document(self, path: str):
        """The JSON a `GET path` answers with, or None when it answers no 200 JSON (no such
        endpoint); a server that cannot be reached, or does not answer in time, is an error."""
        wait_s = min(PROBE_TIMEOUT_S, self.options.timeout_s)
        try:
            response = await self._http.get(path, timeout=wait_s)
        except httpx.TimeoutException:
            raise self._fail(
                f"{self._where(path)}: no answer within {wait_s:g} s, asked before any speech request; is a speech "
                "server (vllm-omni, moss serve) up and ready there, and is the URL its base, e.g. "
                "http://127.0.0.1:8091?"
            ) from None
        except httpx.HTTPError as e:
            raise self._fail(f"{self._where(path)}: {self._describe(e)}") from None
        if response.status_code != 200:
            return None
        try:
            return response.json()
        except (ValueError, RecursionError):
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
        async with self.in_flight() as slot:
            reply, attempts = await self._attempts(request, context, lambda: self._once(request, body, context, timed))
        reply.attempts = attempts
        return slot.stamp(reply, started)

    async def speak_batch(
        self, requests: list[str], body: dict[str, Any], context: str, started: float | None = None
    ) -> list[Reply]:
        """Send one call of the batch route (`POST /v1/audio/speech/batch`: `body["items"]`, one per
        request of `requests`, in vllm-omni 0.30.0's shape), re-sending it whole on transient failures,
        and decode each item's audio. The call takes one connection and counts as len(requests)
        requests in flight. vllm-omni answers 200 whatever its items do, each item's result with its
        `index`, `status` "success" (base64 `audio_data`, `media_type`) or "error" (`error`)
        (protocol/audio.py:537-554, serving_speech.py:2767-2831, api_server.py:1418-1424): an item
        that failed is a ServerError naming its request."""
        async with self.in_flight(len(requests)) as slot:
            replies, attempts = await self._attempts(
                requests[0], context, lambda: self._batch_once(requests, body, context)
            )
        for reply in replies:
            reply.attempts = attempts
            slot.stamp(reply, started)
        return replies

    @asynccontextmanager
    async def in_flight(self, requests: int = 1) -> AsyncIterator[Slot]:
        """One of the --concurrency slots, held by `requests` requests sent together (a batch call's
        items), counted among this client's requests in flight while it is held."""
        async with self._slots:
            keys = [next(self._ids) for _ in range(requests)]
            self._active.update(dict.fromkeys(keys, 0))
            count = len(self._active)
            for key, most in self._active.items():
                self._active[key] = max(most, count)
            slot = Slot(time.perf_counter())
            try:
                yield slot
            finally:
                slot.most = max(self._active.pop(key) for key in keys)
                slot.end = time.perf_counter()

    async def _attempts(self, request: str, context: str, once: Callable[[], Awaitable[T]]) -> tuple[T, int]:
        """What `once()` answers, sent again after each transient failure (up to --retries), and the
        number of attempts it took."""
        attempt = 1
        while True:
            try:
                return await once(), attempt
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
        arrivals: list[tuple[float, int]] | None = [] if timed else None
        raw_stream = body.get("stream_format") == "audio"  # is_raw_audio_stream (protocol/audio.py:327-328)
        bounds = AnswerBounds.of([body], self.options, encoded=bool(body.get("stream")) and not raw_stream)
        response = await self._answer(what, request, self._post(speech_api.SPEECH_PATH, body, bounds, what, arrivals))
        headers = moss_headers(response.headers)
        fmt = str(body.get("response_format", self.options.response_format))
        content_type = response.headers.get("content-type", "")
        pcm, rate = self._audio(
            response.content, fmt, content_type, headers, what, request, response.status_code, raw_stream
        )
        self._within(bounds, pcm, rate, what, request, response.status_code)
        return Reply(request, context, pcm, rate, headers, arrivals=arrivals)

    def _within(self, bounds: AnswerBounds, pcm: np.ndarray, rate: int, what: str, request: str, status: int) -> None:
        """Audio longer than the request's frames make is no answer to it (a runaway or hostile server)."""
        if (longer := bounds.too_long(len(pcm), rate)) is not None:
            raise self._fail(f"{what}: HTTP {status}, but {longer}", request, status)

    async def _answer(self, what: str, request: str, sent: Awaitable[httpx.Response]) -> httpx.Response:
        """The response to a POST (`sent`) with a 2xx status; an error status or a lost connection
        raised as the server's words (`_Transient` where a re-send may cure it)."""
        self.sent += 1
        try:
            response = await sent
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _Transient(self.options.redact(f"{what}: connection lost ({type(e).__name__}: {e})"), None) from None
        except httpx.HTTPError as e:
            raise self._fail(f"{what}: {self._describe(e)}", request) from None
        status = response.status_code
        if 300 <= status < 400:  # never followed: a request's body would go somewhere --server did not name
            where = response.headers.get("location") or "(no Location header)"
            raise self._fail(
                f"{what}: HTTP {status} {response.reason_phrase}: a redirect, not followed (give --server the "
                f"address it points to): {shown(where)}",
                request,
                status,
            )
        if status >= 400:
            words = _error_message(response)
            message = f"{what}: HTTP {status} {response.reason_phrase}: {words}"
            if (setting := server_setting(words)) is not None:  # the same answer to every re-send
                raise self._fail(f"{message.rstrip('.')}. {setting}", request, status)
            if status >= 500:
                raise _Transient(self.options.redact(message), status, _retry_after(response))
            raise self._fail(message, request, status)
        return response

    def _audio(
        self,
        content: bytes,
        fmt: str,
        content_type: str,
        headers: dict[str, str],
        what: str,
        request: str,
        status: int,
        raw_stream: bool = False,
    ) -> tuple[np.ndarray, int]:
        """(int16 samples, rate) of an answer's audio. Raw PCM says nothing of its layout: the
        server's headers where sent, else the options."""
        rate = _positive(headers.get(speech_api.HEADER_SAMPLE_RATE)) or self.options.sample_rate or DEFAULT_PCM_RATE
        channels = _positive(headers.get(speech_api.HEADER_CHANNELS)) or self.options.channels or DEFAULT_PCM_CHANNELS
        try:
            return decode_audio(content, fmt, content_type, sample_rate=rate, channels=channels, raw_stream=raw_stream)
        except NotAudio as e:
            raise self._fail(f"{what}: HTTP {status}, but the body is not {fmt} audio: {e}", request, status) from None

    async def _batch_once(self, requests: list[str], body: dict[str, Any], context: str) -> list[Reply]:
        where = self._where(speech_api.BATCH_PATH)
        what = f"batch of {len(requests)} ({', '.join(map(repr, requests))}; {context}) to {where}"
        bounds = AnswerBounds.of(body["items"], self.options, encoded=True)
        response = await self._answer(what, requests[0], self._post(speech_api.BATCH_PATH, body, bounds, what))
        status = response.status_code
        try:
            results = response.json().get("results")
        except (ValueError, AttributeError, RecursionError):
            results = None
        if not isinstance(results, list) or len(results) != len(requests):
            said = "no results list" if not isinstance(results, list) else f"{len(results)} results"
            raise self._fail(
                f"{what}: HTTP {status} with {said} for {len(requests)} items: {_first_line(response.text)}"
            )
        by_index = {r.get("index"): r for r in results if isinstance(r, dict)}
        fmt = str(body.get("response_format", self.options.response_format))
        replies = []
        for index, request in enumerate(requests):
            item = f"{what}: item {index} ({request!r})"
            result = by_index.get(index, {})
            if result.get("status") != "success":
                words = str(result.get("error") or f"no result for index {index}")
                setting = server_setting(words)
                raise self._fail(
                    f"{item}: {words.rstrip('.')}. {setting}" if setting else f"{item}: {words}", request, status
                )
            try:
                audio = base64.b64decode(result.get("audio_data") or "", validate=True)
            except ValueError:
                raise self._fail(f"{item}: its audio_data is not base64", request, status) from None
            headers = item_headers(result)
            fmt_item = str(body["items"][index].get("response_format") or fmt)
            media_type = str(result.get("media_type") or "")
            pcm, rate = self._audio(audio, fmt_item, media_type, headers, item, request, status)
            self._within(AnswerBounds.of([body["items"][index]], self.options), pcm, rate, item, request, status)
            replies.append(Reply(request, context, pcm, rate, headers))
        return replies

    async def _post(
        self,
        path: str,
        body: dict[str, Any],
        bounds: AnswerBounds,
        what: str,
        arrivals: list[tuple[float, int]] | None = None,
    ) -> httpx.Response:
        """POST `body` to `path` and read the answer as it comes, within `bounds`: the whole answer by its
        deadline, audio up to its bytes (a declared Content-Length past them is refused unread), an answer
        that is no audio up to ERROR_BYTES (its words are at the top). With `arrivals`, append (seconds
        since sending, bytes received so far) for every piece."""
        sent, pieces, size = time.perf_counter(), [], 0
        try:
            async with asyncio.timeout(bounds.deadline_s):
                async with self._http.stream("POST", path, json=body) as response:
                    audio = response.status_code < 300
                    limit = bounds.max_bytes if audio else ERROR_BYTES
                    declared = response.headers.get("content-length", "")
                    if audio and declared.isdigit() and int(declared) > limit:
                        raise self._fail(f"{what}: Content-Length {declared}: {bounds.too_many_bytes(int(declared))}")
                    async for piece in response.aiter_bytes():
                        size += len(piece)
                        if size > limit and audio:
                            raise self._fail(f"{what}: {bounds.too_many_bytes(size)}")
                        pieces.append(piece[: max(limit - (size - len(piece)), 0)])
                        if arrivals is not None and piece:
                            arrivals.append((time.perf_counter() - sent, size))
                        if size > limit:  # an error's words: the rest is not read
                            break
        except TimeoutError:
            raise self._fail(f"{what}: {bounds.overdue()}") from None
        # The body, already decoded, as a plain post would have given it.
        kept = [(k, v) for k, v in response.headers.multi_items() if k.lower() not in _BODY_ENCODING]
        said = {k: v for k, v in response.extensions.items() if k in ("reason_phrase", "http_version")}
        return httpx.Response(
            response.status_code, headers=kept, content=b"".join(pieces), request=response.request, extensions=said
        )


def _positive(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() and int(value) > 0 else None


def probe(options: ServerOptions) -> ServerInfo:
    """`SpeechClient.probe` from outside an event loop, on a client of its own."""

    async def ask() -> ServerInfo:
        async with SpeechClient(options) as client:
            return await client.probe()

    return asyncio.run(ask())


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
