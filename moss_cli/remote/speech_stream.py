"""Speech over vllm-omni's WebSocket stream (`/v1/audio/speech/stream`), the path voice agents use to
feed an LLM's text into TTS as it arrives; `moss serve` serves it too.

The protocol, as vllm-omni 0.30.0 speaks it (entrypoints/openai/serving_speech_stream.py:23-52,
108-226 of its wheel): the client sends `session.config` (the request's fields, the seed among them:
protocol/audio.py:556-638), then each utterance's text as `input.text` chunks and `input.done`, which
flushes the utterance and keeps the connection open, and at last `session.close`. For each utterance
the server answers `audio.start`, the audio as binary frames (or `audio.chunk` JSON with base64 PCM when
`word_timestamps` is on), `audio.done`, then `session.done`; a problem is `{"type": "error", "message"}`.
A server whose deploy has no handler for the route answers only "Streaming speech is not available"
(api_server.py:1696-1715).

`SpeechStream` is one session: each `speak` one utterance, answered as the HTTP client answers a
request (a `Reply`; a `ServerError` naming the request). A server without the route is a
`StreamUnavailable`, which says why, so a caller can skip the path instead of failing."""

from __future__ import annotations

import asyncio
import base64
import json
import time
from typing import Any, Sequence
from urllib.parse import urlsplit, urlunsplit

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import (
    ConnectionClosed,
    InvalidHandshake,
    InvalidMessage,
    InvalidStatus,
    InvalidURI,
    WebSocketException,
)

from .. import speech_api
from .bounds import AnswerBounds
from .client import ServerError
from .reply import NotAudio, Reply, decode_audio, item_headers
from .settings import DEFAULT_PCM_CHANNELS, DEFAULT_PCM_RATE, ServerOptions

NOT_AVAILABLE = "Streaming speech is not available"  # api_server.py:1704-1714
NO_ROUTE = (403, 404)  # the upgrade refused: a server or proxy without the route (Starlette answers 403)


class StreamUnavailable(ServerError):
    """The server does not serve the stream; `reason` says why (a caller may skip the path on it)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def stream_url(options: ServerOptions) -> str:
    """The route's ws:// (wss:// for https) URL, with --server's path prefix and query."""
    parts = urlsplit(options.base_url)
    scheme = "wss" if parts.scheme == "https" else "ws"
    return urlunsplit((scheme, parts.netloc, parts.path + speech_api.STREAM_PATH, options.query, ""))


def not_an_upgrade(error: InvalidHandshake) -> str:
    """Why an answer to the upgrade is not a WebSocket server's, in words: an HTTP/1.0 page (Python's
    http.server, an old proxy), a connection closed on the upgrade, something that is not HTTP, or a
    101 without the handshake's headers (a proxy that drops `Upgrade`)."""
    cause = error.__cause__
    if isinstance(error, InvalidMessage) and isinstance(cause, EOFError):
        return "the connection was closed on the WebSocket upgrade: no WebSocket server answers there"
    if isinstance(error, InvalidMessage):
        line = str(cause).rpartition(": ")[2] if cause is not None else str(error)
        return f"the WebSocket upgrade was answered {line[:120]!r}, not as a WebSocket server answers it"
    return f"the WebSocket upgrade was not completed ({type(error).__name__}: {str(error)[:120]})"


def text_chunks(text: str, pieces: int = 3) -> list[str]:
    """`text` as a voice agent sends it, in `pieces` input.text messages cut between words (fewer for
    fewer words): joined, they are `text` to the character, so the flushed utterance is its text."""
    words = text.split(" ")
    size = -(-len(words) // pieces)
    groups = [words[i : i + size] for i in range(0, len(words), size)]
    return [" ".join(group) + (" " if i < len(groups) - 1 else "") for i, group in enumerate(groups)]


class SpeechStream:
    """One WebSocket session: `async with SpeechStream(options, config) as stream:`, then `await
    stream.speak(request, chunks)` for each utterance, one at a time. `config` is the session.config
    message's fields (`speech_api.session_config` makes it from a request's body); its `seed`, if any,
    seeds every utterance. The connection and each utterance wait `options.timeout_s` at most."""

    def __init__(self, options: ServerOptions, config: dict[str, Any], context: str = "stream") -> None:
        self.options = options
        self.config = {**config, "type": "session.config"}
        self.context = context
        self.utterances = 0  # input.done sent
        self._socket: ClientConnection | None = None

    @property
    def where(self) -> str:
        return f"{self.options.public_url}{speech_api.STREAM_PATH}"

    def _fail(self, message: str, request: str | None = None) -> ServerError:
        return ServerError(self.options.redact(message), request=request)

    def _refused(self, status: int, phrase: str, headers) -> ServerError:
        """An HTTP answer to the upgrade instead of 101. A server trouble (a 5xx but 501 and 505, a 408 or
        429: busy) is an error as it is on any route; any other answer says that this server, or a
        proxy before it, does not serve the stream here, which a caller may skip."""
        said = f"HTTP {status}{f' {phrase}' if phrase else ''} to the WebSocket upgrade"
        if (status >= 500 and status not in (501, 505)) or status in (408, 429):
            return self._fail(f"{self.where}: {said}")
        if status in NO_ROUTE:
            reason = f"{said}: the server has no {speech_api.STREAM_PATH}"
        elif 300 <= status < 400:
            reason = f"{said}: a redirect to {headers.get('location', '(no Location)')}, not followed"
        else:
            reason = f"{said}: not a WebSocket server's answer"
        return StreamUnavailable(self.options.redact(f"{self.where}: {reason}"), self.options.redact(reason))

    async def __aenter__(self) -> SpeechStream:
        try:
            self._socket = await connect(
                stream_url(self.options),
                additional_headers=dict(self.options.headers),
                open_timeout=self.options.timeout_s,
                close_timeout=min(self.options.timeout_s, 10.0),
                # an utterance's audio comes as one frame when not streamed: a whole file, of any budget
                max_size=AnswerBounds.of([{}], self.options).max_bytes,
                proxy=None,  # as the HTTP client: straight to --server
            )
        except InvalidStatus as e:
            raise self._refused(e.response.status_code, e.response.reason_phrase, e.response.headers) from None
        except TimeoutError:
            raise self._fail(f"{self.where}: no WebSocket handshake within {self.options.timeout_s:g} s") from None
        except InvalidHandshake as e:  # an answer that is no WebSocket server's: the route is not served here
            reason = not_an_upgrade(e)
            raise StreamUnavailable(self.options.redact(f"{self.where}: {reason}"), reason) from None
        except (OSError, InvalidURI, WebSocketException) as e:
            raise self._fail(f"{self.where}: cannot open a WebSocket ({type(e).__name__}: {e})") from None
        await self._send(self.config, None)
        return self

    async def configure(self, config: dict[str, Any]) -> None:
        """Another request's session.config between utterances, on the same connection: the handler
        replaces its config whole (serving_speech_stream.py:148-161) and answers nothing, so a bad one
        is the next utterance's error. The same config again is not re-sent."""
        wanted = {**config, "type": "session.config"}
        if wanted != self.config:
            self.config = wanted
            await self._send(wanted, None)

    async def __aexit__(self, *exc) -> None:
        """session.close; the server closes the connection (serving_speech_stream.py:209-211)."""
        try:
            await self._socket.send(json.dumps({"type": "session.close"}))
            await self._socket.wait_closed()
        except ConnectionClosed:
            pass
        finally:
            await self._socket.close()

    async def _send(self, message: dict[str, Any], request: str | None) -> None:
        """Send a message; if the server has closed the session, its last words (an error it sent
        before closing, still buffered here) are the failure."""
        try:
            await self._socket.send(json.dumps(message))
        except ConnectionClosed as e:
            said = []
            try:
                while True:
                    raw = await asyncio.wait_for(self._socket.recv(), 1.0)
                    if isinstance(raw, str) and '"error"' in raw:
                        said.append(str(json.loads(raw).get("message")))
            except (ConnectionClosed, asyncio.TimeoutError, ValueError, AttributeError):
                pass
            what = f"utterance {request!r} ({self.context}) to {self.where}" if request else self.where
            if NOT_AVAILABLE in said:
                raise StreamUnavailable(self.options.redact(f"{what}: {NOT_AVAILABLE}"), NOT_AVAILABLE) from None
            words = "; ".join(said) or f"the server closed the session ({e})"
            raise self._fail(f"{what}: {words}", request) from None

    async def speak(self, request: str, chunks: Sequence[str]) -> Reply:
        """One utterance: its text in `chunks` (each an input.text message), then input.done; its audio
        as a Reply. An error the server sends is a ServerError naming `request` (after the rest of the
        utterance's answer is read, so the session can go on); NOT_AVAILABLE is a StreamUnavailable."""
        what = f"utterance {request!r} ({self.context}) to {self.where}"
        bounds = AnswerBounds.of([self.config], self.options)
        begin = time.perf_counter()
        for chunk in chunks:
            await self._send({"type": "input.text", "text": chunk}, request)
        await self._send({"type": "input.done"}, request)
        self.utterances += 1
        audio, arrivals, facts, errors, started = bytearray(), [], {}, [], False
        deadline = time.monotonic() + bounds.deadline_s
        while True:
            message = await self._receive(what, request, deadline, errors, bounds)
            if message is None:  # the server closed the session
                break
            if len(audio) > bounds.max_bytes:
                raise self._fail(f"{what}: {bounds.too_many_bytes(len(audio))}", request)
            if isinstance(message, bytes):
                audio += message
                arrivals.append((time.perf_counter() - begin, len(audio)))
                continue
            kind = message.get("type")
            if kind == "error":
                words = str(message.get("message", message))
                if words == NOT_AVAILABLE:
                    raise StreamUnavailable(self.options.redact(f"{what}: {words}"), words)
                errors.append(words)
            elif kind == "audio.chunk":  # word_timestamps: base64 PCM in JSON
                audio += base64.b64decode(message.get("audio_b64") or "")
                arrivals.append((time.perf_counter() - begin, len(audio)))
            elif kind in ("audio.start", "audio.done"):
                started = True
                facts.update(message)
            elif kind == "session.done":
                break
        if errors:
            raise self._fail(f"{what}: {'; '.join(errors)}", request)
        if not started:  # a blank text is no request (speech_text_splitter.py:195-202)
            raise self._fail(f"{what}: session.done without audio: the server synthesized nothing", request)
        headers = item_headers(facts)  # moss serve's moss_* keys, as a batch item carries them
        reply = Reply(request, self.context, *self._audio(bytes(audio), headers, what, request), headers)
        if (longer := bounds.too_long(len(reply.pcm), reply.sample_rate)) is not None:
            raise self._fail(f"{what}: {longer}", request)
        reply.wall_s = time.perf_counter() - begin
        reply.arrivals = arrivals
        return reply

    async def _receive(
        self, what: str, request: str, deadline: float, errors: list[str], bounds: AnswerBounds
    ) -> dict | bytes | None:
        """The next message (JSON decoded), or None once the server has closed the session."""
        try:
            wait = min(max(deadline - time.monotonic(), 0.0), self.options.timeout_s)
            raw = await asyncio.wait_for(self._socket.recv(), wait)
        except asyncio.TimeoutError:
            late = time.monotonic() >= deadline
            said = bounds.overdue() if late else f"no message within {self.options.timeout_s:g} s (--timeout)"
            raise self._fail(f"{what}: {said}", request) from None
        except ConnectionClosed as e:
            if errors:
                return None
            raise self._fail(f"{what}: the server closed the session ({e})", request) from None
        if isinstance(raw, bytes):
            return raw
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            raise self._fail(f"{what}: a text message that is not JSON: {raw[:120]!r}", request) from None
        if not isinstance(message, dict):
            raise self._fail(f"{what}: a message that is not a JSON object: {raw[:120]!r}", request)
        return message

    def _audio(self, content: bytes, headers: dict[str, str], what: str, request: str) -> tuple:
        """(int16 samples, rate): a whole file per utterance, or raw PCM (stream_audio, word_timestamps).
        vllm-omni's audio.start gives raw PCM a nominal 24 kHz whatever the model's rate
        (serving_speech_stream.py:77, 339-342): the rate comes from moss serve's facts or the options."""
        raw = bool(self.config.get("stream_audio") or self.config.get("word_timestamps"))
        fmt = "pcm" if raw else str(self.config.get("response_format") or "wav")
        rate = int(headers.get(speech_api.HEADER_SAMPLE_RATE) or self.options.sample_rate or DEFAULT_PCM_RATE)
        channels = int(headers.get(speech_api.HEADER_CHANNELS) or self.options.channels or DEFAULT_PCM_CHANNELS)
        try:
            return decode_audio(content, fmt, "", sample_rate=rate, channels=channels)
        except NotAudio as e:
            raise self._fail(f"{what}: the audio is not {fmt}: {e}", request) from None
