"""The HTTP routes (FastAPI): `POST /v1/audio/speech`, `GET /v1/models`, `GET /health`, with
OpenAI-style errors for everything a client can get wrong."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from .. import __version__
from ..io.audio import codes_sha256, to_pcm16
from ..pipeline import SynthResult
from ..pipeline.live import LiveEngine, Unavailable
from ..speech_api import (
    ENVIRONMENT_PATH,
    HEADER_CHANNELS,
    HEADER_CODES_SHA256,
    HEADER_FRAMES,
    HEADER_MAX_IN_FLIGHT,
    HEADER_REQUEST_ID,
    HEADER_SAMPLE_RATE,
    HEADER_SEED,
    HEADER_SEED_SOURCE,
    HEADER_STOP_REASON,
    HEALTH_PATH,
    MEDIA_TYPES,
    MODELS_PATH,
    SPEECH_PATH,
)
from .audio import encode, wav_stream_header
from .errors import ApiError, invalid
from .limits import ApiKey, BodyLimit
from .requests import Ask, Intake

log = logging.getLogger("moss.serve")


class SpeechBody(BaseModel):
    """The JSON types of vllm-omni's speech request (strict: "5" is not a seed); values are checked
    afterwards by the request-file rules, and fields moss does not know are named there (400)."""

    model_config = ConfigDict(extra="allow", strict=True)

    input: str
    model: str | None = None
    voice: str | None = None
    instructions: str | None = None
    language: str | None = None
    response_format: str | None = None
    stream: bool | None = None
    stream_format: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    audio_temperature: float | None = None  # audio_*: moss's overrides of the audio sampler (vllm-omni has none)
    audio_top_p: float | None = None
    audio_top_k: int | None = None
    audio_repetition_penalty: float | None = None
    extra_params: dict[str, Any] | None = None
    speed: float | None = None
    task_type: str | None = None


def create_app(
    engine: LiveEngine, intake: Intake, api_key: str | None = None, request_timeout_s: float | None = None
) -> FastAPI:
    app = FastAPI(title="moss serve", version=__version__)
    app.add_middleware(BodyLimit, limit=intake.limits.body_bytes)
    if api_key:  # added last, so it runs first: a request without the key is refused unread
        app.add_middleware(ApiKey, key=api_key, open_paths=(HEALTH_PATH,))
    synth, started = engine.synth, int(time.time())
    rate, channels = synth.codec_config.sampling_rate, synth.codec_config.channels

    @app.exception_handler(ApiError)
    async def api_error(request, error: ApiError) -> JSONResponse:
        headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s is not None else None
        return JSONResponse(error.body(), status_code=error.status, headers=headers)

    @app.exception_handler(RequestValidationError)
    async def validation_error(request, error: RequestValidationError) -> JSONResponse:
        return await api_error(request, from_validation(error.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request, error: HTTPException) -> JSONResponse:  # unknown routes, wrong methods
        if error.status_code == 404:
            return await api_error(request, ApiError(404, f"no such path: {request.url.path}"))
        return await api_error(request, ApiError(error.status_code, str(error.detail)))

    @app.exception_handler(Exception)
    async def server_error(request, error: Exception) -> JSONResponse:  # a bug: still the OpenAI shape (and logged)
        return await api_error(request, ApiError(500, f"internal error: {type(error).__name__}"))

    @app.get(HEALTH_PATH)
    async def health() -> dict:
        if not engine.ready:
            raise ApiError(503, "the engine is not running")
        return {
            "status": "ok",
            "model": intake.model_name,
            "max_batch": engine.max_batch,
            "in_flight": engine.in_flight,
        }

    @app.get(ENVIRONMENT_PATH)
    async def environment() -> dict:
        return await run_in_threadpool(engine.environment)

    @app.get(MODELS_PATH)
    async def models() -> dict:
        entry = {"id": intake.model_name, "object": "model", "created": started, "owned_by": "moss"}
        return {"object": "list", "data": [entry]}

    @app.post(SPEECH_PATH)
    async def speech(body: SpeechBody, connection: Request) -> Response:
        ask = await run_in_threadpool(intake.prepare, body.model_dump(exclude_unset=True))
        loop = asyncio.get_running_loop()
        arrived: asyncio.Queue = asyncio.Queue()  # chunks (bytes), then the result or the error

        def done(future) -> None:  # in the engine thread
            intake.release(ask)  # the engine is done with its reference copy
            hand_over(loop, arrived.put_nowait, future.exception() or future.result())

        def chunk(audio) -> None:  # in the engine thread: each decoded chunk as int16 PCM
            hand_over(loop, arrived.put_nowait, to_pcm16(audio).tobytes())

        try:
            future = engine.submit(ask.prepared, chunk if ask.stream else None)
        except Unavailable as e:
            intake.release(ask)
            raise ApiError(503, str(e), retry_after_s=e.retry_after_s) from None
        future.add_done_callback(done)
        headers = {
            HEADER_REQUEST_ID: ask.prepared.request.id,
            HEADER_SEED: "none" if ask.prepared.effective.seed is None else str(ask.prepared.effective.seed),
            HEADER_SEED_SOURCE: ask.prepared.effective.seed_source,
            HEADER_SAMPLE_RATE: str(rate),
            HEADER_CHANNELS: str(channels),
        }
        media_type = MEDIA_TYPES[ask.response_format]
        key = ask.prepared.request.id
        if ask.stream:
            body_chunks = streamed(ask, arrived, rate, channels, lambda: engine.cancel(key), request_timeout_s)
            return StreamingResponse(body_chunks, media_type=media_type, headers=headers)
        # No chunks come for a request that does not stream: the first item is its outcome.
        outcome = await until_disconnected(connection, arrived.get(), request_timeout_s)
        if outcome is GONE:
            engine.cancel(key)
            return Response(status_code=CLIENT_CLOSED)
        if outcome is TIMED_OUT:
            engine.cancel(key)
            raise ApiError(504, timed_out(request_timeout_s))
        if isinstance(outcome, BaseException):
            raise ApiError(500, f"synthesis failed: {type(outcome).__name__}: {outcome}")
        headers.update(result_headers(outcome))
        content = await run_in_threadpool(encode, outcome.pcm, rate, ask.response_format)
        return Response(content, media_type=media_type, headers=headers)

    return app


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


async def streamed(
    ask: Ask,
    arrived: asyncio.Queue,
    rate: int,
    channels: int,
    cancel: Callable[[], None],
    timeout_s: float | None = None,
):
    """The body of a streaming response: each chunk's PCM as the engine decodes it. If the body
    stops before the end (the client went away, so the server stops sending, or `timeout_s`
    passed, which cuts the stream), `cancel` frees the request's place in the batch."""
    finished = False
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    try:
        if ask.response_format == "wav":
            yield wav_stream_header(rate, channels)
        while True:
            try:
                left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
                item = await asyncio.wait_for(arrived.get(), left)
            except asyncio.TimeoutError:
                log.error("request %s %s", ask.prepared.request.id, timed_out(timeout_s))
                raise RuntimeError(timed_out(timeout_s)) from None
            if isinstance(item, bytes):
                if item:
                    yield item
            elif isinstance(item, BaseException):  # too late for a status: the stream ends unfinished
                finished = True
                log.error("request %s failed while streaming: %s", ask.prepared.request.id, item)
                raise RuntimeError(f"synthesis failed: {item}")
            else:
                finished = True
                return
    finally:
        if not finished:
            cancel()


def result_headers(result: SynthResult) -> dict[str, str]:
    """What the engine did for the request (known once it is finished; not sent when streaming)."""
    return {
        HEADER_FRAMES: str(result.frames),
        HEADER_CODES_SHA256: codes_sha256(result.codes),
        HEADER_MAX_IN_FLIGHT: str(result.batch_size_seen),
        HEADER_STOP_REASON: result.stop_reason,
    }


def hand_over(loop: asyncio.AbstractEventLoop, put: Callable[[Any], None], item: Any) -> None:
    """From the engine thread to the request's event loop (gone if the server is stopping hard)."""
    try:
        loop.call_soon_threadsafe(put, item)
    except RuntimeError:
        pass


def from_validation(errors: list[dict]) -> ApiError:
    """FastAPI's validation errors as one OpenAI error naming the first field."""
    if errors and errors[0].get("type") == "json_invalid":
        reason = errors[0].get("ctx", {}).get("error", "malformed")
        return ApiError(400, f"the body is not valid JSON ({reason})", None, "invalid_json")
    if errors and tuple(errors[0].get("loc", ())) == ("body",):  # not an object at all
        return ApiError(422, "the body must be a JSON object, sent as Content-Type: application/json")
    problems = []
    for error in errors:
        where = ".".join(str(part) for part in error.get("loc", ()) if part != "body")
        problems.append((where or None, error.get("msg", "invalid")))
    return invalid(problems or [(None, "invalid body")], 422)
