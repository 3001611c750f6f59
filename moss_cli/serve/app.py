"""The HTTP routes (FastAPI): `POST /v1/audio/speech` (and the batch route, batch.py, and the
WebSocket speech stream, stream.py),
`GET /v1/models`, `GET /health`, with vllm-omni's error shape for everything a client can get
wrong. What a route does with a request is in requests.py (the body) and exchange.py (the answer)."""

from __future__ import annotations

import time

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from .. import __version__
from ..pipeline.live import LiveEngine
from ..speech_api import (
    ENVIRONMENT_PATH,
    HEADER_CHANNELS,
    HEADER_SAMPLE_RATE,
    HEALTH_PATH,
    MEDIA_TYPES,
    MODELS_PATH,
    SPEECH_PATH,
)
from .audio import encode
from .batch import add_batch_route
from .errors import ApiError, schema_error
from .exchange import (
    CLIENT_CLOSED,
    GONE,
    TIMED_OUT,
    as_headers,
    json_body,
    request_facts,
    result_facts,
    sse_events,
    stream_pieces,
    submit,
    timed_out,
    until_disconnected,
    usage,
    usage_headers,
)
from .limits import ApiKey, BodyLimit
from .requests import Intake
from .stream import add_stream_route


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
        return await api_error(request, schema_error(error.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request, error: HTTPException) -> JSONResponse:  # unknown routes, wrong methods
        if error.status_code == 404:
            return await api_error(request, ApiError(404, f"no such path: {request.url.path}"))
        return await api_error(request, ApiError(error.status_code, str(error.detail)))

    @app.exception_handler(Exception)
    async def server_error(request, error: Exception) -> JSONResponse:  # a bug: still the OpenAI shape (and logged)
        return await api_error(request, ApiError(500, f"internal error: {type(error).__name__}"))

    @app.get(HEALTH_PATH)
    async def health() -> JSONResponse:
        """vllm-omni's own /health, which replaces vLLM's empty 200 (api_server.py:342, 1937-1960):
        `{"status": "healthy"}`, or 503 `{"status": "unhealthy", "reason": ...}` (not the error
        shape); moss adds what its engine holds."""
        if not engine.ready:
            return JSONResponse({"status": "unhealthy", "reason": "the engine is not running"}, status_code=503)
        moss = {"model": intake.model_name, "max_batch": engine.max_batch, "in_flight": engine.in_flight}
        return JSONResponse({"status": "healthy", **moss})

    @app.get(ENVIRONMENT_PATH)
    async def environment() -> dict:
        return await run_in_threadpool(engine.environment)

    @app.get(MODELS_PATH)
    async def models() -> dict:
        entry = {"id": intake.model_name, "object": "model", "created": started, "owned_by": "moss"}
        return {"object": "list", "data": [entry]}

    @app.post(SPEECH_PATH)
    async def speech(connection: Request) -> Response:
        body = await json_body(connection)
        ask = await run_in_threadpool(intake.prepare, body)
        submitted = submit(engine, intake, ask, stream=bool(ask.stream))
        headers = {**as_headers(request_facts(ask)), HEADER_SAMPLE_RATE: str(rate), HEADER_CHANNELS: str(channels)}
        if ask.stream:
            pieces = stream_pieces(submitted.outputs(request_timeout_s), ask.response_format, rate, channels)
            if ask.stream == "sse":
                events = sse_events(pieces, ask.response_format, lambda result: usage(ask, result))
                return StreamingResponse(events, media_type="text/event-stream", headers=headers)
            chunks = (piece async for piece in pieces if isinstance(piece, bytes))
            return StreamingResponse(chunks, media_type=MEDIA_TYPES[ask.response_format], headers=headers)
        # No chunks come for a request that does not stream: the first item is its outcome.
        outcome = await until_disconnected(connection, submitted.outcome(), request_timeout_s)
        if outcome is GONE:
            submitted.cancel()
            return Response(status_code=CLIENT_CLOSED)
        if outcome is TIMED_OUT:
            submitted.cancel()
            raise ApiError(504, timed_out(request_timeout_s))
        if isinstance(outcome, BaseException):
            raise ApiError(500, f"synthesis failed: {type(outcome).__name__}: {outcome}")
        headers.update(as_headers(result_facts(outcome)))
        headers.update(usage_headers(usage(ask, outcome)))
        content = await run_in_threadpool(encode, outcome.pcm, rate, ask.response_format)
        return Response(content, media_type=MEDIA_TYPES[ask.response_format], headers=headers)

    add_batch_route(app, engine, intake, request_timeout_s)
    add_stream_route(app, engine, intake, request_timeout_s)
    return app
