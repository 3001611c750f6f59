"""What passes between a request's handler and the engine and back to the client: the JSON body
read, the wait for an answer (or the client's going away, or the time running out), the chunks of
a stream as raw bytes or as vllm-omni's server-sent events, and the headers and usage an answer
carries. The routes (app.py, batch.py) are built from these."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

from fastapi import Request

from ..io.audio import codes_sha256, to_pcm16
from ..pipeline import SynthResult
from ..pipeline.live import LiveEngine, Unavailable
from ..speech_api import (
    HEADER_CODES_SHA256,
    HEADER_FRAMES,
    HEADER_MAX_IN_FLIGHT,
    HEADER_REQUEST_ID,
    HEADER_SEED,
    HEADER_SEED_SOURCE,
    HEADER_STOP_REASON,
)
from .audio import audio_delta, sse_event, wav_stream_header
from .errors import ApiError
from .requests import Ask, Intake

log = logging.getLogger("moss.serve")


GONE = object()  # the client closed its connection before the answer
TIMED_OUT = object()  # --request-timeout passed before the answer
CLIENT_CLOSED = 499  # nobody reads it; the status access logs use for a client that went away


async def until_disconnected(connection: Request, answer, timeout_s: float | None = None):
    """The answer awaited, or GONE if the client disconnects first (its body is already read, so
    the next message it can send is the disconnect), or TIMED_OUT after `timeout_s`."""
    answered = asyncio.ensure_future(answer)
    gone = asyncio.ensure_future(_disconnect(connection))
    await asyncio.wait((answered, gone), timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    if answered.done():
        gone.cancel()
        return answered.result()
    answered.cancel()
    if gone.done():
        return GONE
    gone.cancel()
    return TIMED_OUT


def timed_out(timeout_s: float | None) -> str:
    return f"not finished within {timeout_s:g} s (--request-timeout): cancelled, its place in the batch freed"


async def _disconnect(connection: Request) -> None:
    while (await connection.receive())["type"] != "http.disconnect":
        pass


async def json_body(connection: Request) -> Any:
    """The request's JSON, read here rather than by FastAPI so that every check of it answers in
    the API's words: 400 for another content type or a body that is no JSON (as vllm-omni)."""
    if connection.headers.get("content-type", "").split(";")[0].strip().lower() != "application/json":
        raise ApiError(400, "the body must be JSON, sent as Content-Type: application/json")
    try:
        return json.loads(await connection.body())
    except ValueError as e:  # JSON errors and invalid UTF-8 alike
        raise ApiError(400, f"the body is not valid JSON ({e})") from None
    except RecursionError:  # arrays or objects nested past Python's recursion limit
        raise ApiError(400, "the body is not valid JSON (nested too deeply)") from None


class Unfinished(RuntimeError):
    """A streamed request that ended without its audio (the engine failed, or its time ran out)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Submission:
    """A request handed to the engine: what its engine thread hands back arrives in `arrived` (each decoded
    chunk as int16 PCM bytes where it streams, then its result or its error); `cancel` frees its place."""

    ask: Ask
    arrived: asyncio.Queue
    cancel: Callable[[], None]

    def outputs(self, timeout_s: float | None = None) -> AsyncIterator[bytes | SynthResult]:
        """Its chunks as they come, then its result (engine_outputs)."""
        return engine_outputs(self.ask, self.arrived, self.cancel, timeout_s)

    async def outcome(self) -> SynthResult | BaseException:
        """Its result or its error, for a request that does not stream (no chunk comes before it)."""
        return await self.arrived.get()


def submit(engine: LiveEngine, intake: Intake, ask: Ask, stream: bool) -> Submission:
    """`ask` into the engine's running batch, from the event loop: the one bridge every route uses (single,
    stream, batch item, WebSocket utterance). The engine's full queue (or its stopping) is the 503 with the
    Retry-After it gives; the reference copy the ask holds is released when the engine is done with it."""
    loop, arrived = asyncio.get_running_loop(), asyncio.Queue()

    def done(future) -> None:  # in the engine thread
        intake.release(ask)
        hand_over(loop, arrived.put_nowait, future.exception() or future.result())

    def chunk(audio) -> None:  # in the engine thread: each decoded chunk as int16 PCM
        hand_over(loop, arrived.put_nowait, to_pcm16(audio).tobytes())

    try:
        future = engine.submit(ask.prepared, chunk if stream else None)
    except Unavailable as e:
        intake.release(ask)
        raise ApiError(503, str(e), retry_after_s=e.retry_after_s) from None
    future.add_done_callback(done)
    key = ask.prepared.request.id
    return Submission(ask, arrived, lambda: engine.cancel(key))


async def engine_outputs(
    ask: Ask, arrived: asyncio.Queue, cancel: Callable[[], None], timeout_s: float | None = None
) -> AsyncIterator[bytes | SynthResult]:
    """A streamed request's PCM chunks as the engine decodes them, then its result; Unfinished if
    it fails or `timeout_s` passes. If the caller stops reading before the end (the client went
    away, or the stream was cut), `cancel` frees the request's place in the batch."""
    finished = False
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        while True:
            try:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                item = await asyncio.wait_for(arrived.get(), left)
            except asyncio.TimeoutError:
                log.error("request %s %s", ask.prepared.request.id, timed_out(timeout_s))
                raise Unfinished(timed_out(timeout_s), 504) from None
            if isinstance(item, BaseException):  # too late for a status
                finished = True
                log.error("request %s failed while streaming: %s", ask.prepared.request.id, item)
                raise Unfinished(f"synthesis failed: {item}", 500)
            if isinstance(item, bytes):
                if item:
                    yield item
                continue
            finished = True
            yield item
            return
    finally:
        if not finished:
            cancel()


async def stream_pieces(
    outputs: AsyncIterator[bytes | SynthResult], response_format: str, rate: int, channels: int
) -> AsyncIterator[bytes | SynthResult]:
    """What a stream sends, piece by piece, as vllm-omni does (serving_speech.py:1520-1815): for wav
    a header alone first, its sizes "unknown" (with the first chunk, or at the end when no audio
    came, so the body is still a WAV); then each chunk's PCM; the result last."""
    header = wav_stream_header(rate, channels) if response_format == "wav" else None
    async for item in outputs:
        if header is not None:
            yield header
            header = None
        yield item


async def sse_events(
    pieces: AsyncIterator[bytes | SynthResult], response_format: str, usage_of: Callable[[SynthResult], dict]
) -> AsyncIterator[str]:
    """vllm-omni's server-sent events (serving_speech.py:1817-1890): `speech.audio.delta` for each
    piece, then `speech.audio.done` with the usage; a failure after the first event can only be
    said in the stream, as `speech.audio.error`."""
    sent = False
    try:
        async for piece in pieces:
            if isinstance(piece, bytes):
                yield audio_delta(piece, response_format)
                sent = True
            else:
                yield sse_event("speech.audio.done", usage=usage_of(piece))
    except Unfinished as e:
        error = {"message": str(e), "type": "server_error", "param": None, "code": e.status}
        if sent:  # what came so far is not the answer
            error.update(partial_audio=True, action="discard")
        yield sse_event("speech.audio.error", error=error)


def usage(ask: Ask, result: SynthResult) -> dict:
    """vllm-omni's usage (speech_usage.py:90-187): input tokens are the text's and the instruction's,
    output tokens the talker's steps (each frame, and the stop); MOSS-TTS has no audio input tokens."""
    steps = result.frames + int(result.stopped)
    return {
        "input_tokens": ask.text_tokens,
        "output_tokens": steps,
        "total_tokens": ask.text_tokens + steps,
        "input_token_details": {"text_tokens": ask.text_tokens, "audio_tokens": 0},
    }


def usage_headers(used: dict) -> dict[str, str]:
    """The usage as vllm-omni's headers on a non-streamed answer (serving_speech.py:74-78, 640-655)."""
    return {
        "x-vllm-omni-input-tokens": str(used["input_tokens"]),
        "x-vllm-omni-output-tokens": str(used["output_tokens"]),
        "x-vllm-omni-total-tokens": str(used["total_tokens"]),
        "x-vllm-omni-input-text-tokens": str(used["input_token_details"]["text_tokens"]),
        "x-vllm-omni-input-audio-tokens": str(used["input_token_details"]["audio_tokens"]),
    }


def request_facts(ask: Ask) -> dict[str, Any]:
    """What moss decided for a request as it took it (vllm-omni says none of this): its id and its
    effective seed. A single answer sends them as x-moss-* headers, a batch item as moss_* keys."""
    effective = ask.prepared.effective
    return {"request_id": ask.prepared.request.id, "seed": effective.seed, "seed_source": effective.seed_source}


def result_facts(result: SynthResult) -> dict[str, Any]:
    """What the engine did for the request (known once it is finished; not sent when streaming)."""
    return {
        "frames": result.frames,
        "codes_sha256": codes_sha256(result.codes),
        "stop_reason": result.stop_reason,
        "max_in_flight": result.batch_size_seen,
    }


FACT_HEADERS = {
    "request_id": HEADER_REQUEST_ID,
    "seed": HEADER_SEED,
    "seed_source": HEADER_SEED_SOURCE,
    "frames": HEADER_FRAMES,
    "codes_sha256": HEADER_CODES_SHA256,
    "stop_reason": HEADER_STOP_REASON,
    "max_in_flight": HEADER_MAX_IN_FLIGHT,
}


def as_headers(facts: dict[str, Any]) -> dict[str, str]:
    """Facts as their response headers (no seed: "none")."""
    return {FACT_HEADERS[name]: "none" if value is None else str(value) for name, value in facts.items()}


def hand_over(loop: asyncio.AbstractEventLoop, put: Callable[[Any], None], item: Any) -> None:
    """From the engine thread to the request's event loop (gone if the server is stopping hard)."""
    try:
        loop.call_soon_threadsafe(put, item)
    except RuntimeError:
        pass
