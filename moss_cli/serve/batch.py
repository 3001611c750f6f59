"""`POST /v1/audio/speech/batch`: several speech requests in one body, in the shape of vllm-omni
0.30.0's batch route (request models `SpeechBatchItem` / `BatchSpeechRequest`, protocol/audio.py:
446-484; merge and run, serving_speech.py:2735-2831; route, api_server.py:1390-1430), plus a
per-item `seed`. Each item is a single request: the batch's fields merged under its own, the same
checks as `POST /v1/audio/speech`, the same engine, so it joins the running batch like any other
request and gets bitwise the audio it gets alone. An item's problem is its own result; the other
items still run."""

from __future__ import annotations

import asyncio
import base64
import logging
import uuid
from typing import Annotated, Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool

from ..pipeline import SynthResult
from ..pipeline.live import LiveEngine
from ..speech_api import BATCH_PATH, MEDIA_TYPES
from ..validation import INT64_MAX
from .audio import encode
from .errors import ApiError, schema_error
from .exchange import (
    CLIENT_CLOSED,
    GONE,
    Submission,
    json_body,
    request_facts,
    result_facts,
    submit,
    timed_out,
    until_disconnected,
    usage,
)
from .requests import Ask, Intake

log = logging.getLogger("moss.serve")

MAX_ITEMS = 32  # vllm-omni's `tts_batch_max_items` default (serving_speech.py:434, omni_base.py:206)
BATCH_ONLY = ("model", "stream", "stream_format")  # the batch decides these for every item: one model, no streams


class BatchBody(BaseModel):
    """vllm-omni's `BatchSpeechRequest` (protocol/audio.py:466-484): `items` and the fields every
    item takes unless it sets its own, with their types and ranges (coerced as vllm-omni's are).
    Each item is an object checked as a single request's body, on its own."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    items: list[dict[str, Any]] = Field(min_length=1)
    voice: str | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] | None = None
    sample_rate: Annotated[int, Field(gt=0)] | None = None
    speed: float | None = Field(None, ge=0.25, le=4.0)
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    max_new_tokens: int | None = Field(None, ge=1, le=INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(None, ge=0, le=INT64_MAX)
    non_streaming_mode: bool | None = None


def add_batch_route(app: FastAPI, engine: LiveEngine, intake: Intake, request_timeout_s: float | None) -> None:
    rate, channels = engine.synth.codec_config.sampling_rate, engine.synth.codec_config.channels

    @app.post(BATCH_PATH)
    async def speech_batch(connection: Request) -> Response:
        body = read_batch(await json_body(connection))
        check_batch(body, engine, intake)
        shared = batch_fields(body)
        prepared = await asyncio.gather(*(run_in_threadpool(prepare_item, intake, shared, i) for i in body.items))
        asks = {i: p for i, p in enumerate(prepared) if isinstance(p, Ask)}
        submitted = submit_all(engine, intake, asks)
        outcomes = await outcomes_of(connection, submitted, request_timeout_s)
        if outcomes is GONE:
            return Response(status_code=CLIENT_CLOSED)
        results = await run_in_threadpool(item_results, prepared, outcomes, rate, channels)
        return JSONResponse(batch_response(results))


def read_batch(payload: Any) -> BatchBody:
    """The JSON body as a batch, or a 400 for the batch as a whole (vllm-omni's schema errors are
    400 too: api_server.py:1390-1392 and vLLM 0.30's validation handler)."""
    if not isinstance(payload, dict):
        raise ApiError(400, f"the body must be a JSON object with 'items', not a {type(payload).__name__}")
    try:
        return BatchBody.model_validate(payload)
    except ValidationError as e:
        raise schema_error(e.errors()) from None


def check_batch(body: BatchBody, engine: LiveEngine, intake: Intake) -> None:
    """What refuses the whole batch: too many items, another model, fields that are not the
    batch's, more items than the server holds at once with --max-queue."""
    count = len(body.items)
    if count > MAX_ITEMS:
        raise ApiError(400, f"the batch has {count} items; a batch takes at most {MAX_ITEMS}", "items")
    if body.model and body.model != intake.model_name:  # none or "" is the served model, as for one request
        raise ApiError(
            404, f"the model {body.model!r} does not exist; this server serves {intake.model_name!r}", "model"
        )
    if body.model_extra:  # moss names what vllm-omni would drop silently
        keys = list(body.model_extra)
        hint = "; give each item its own 'seed'" if "seed" in keys else ""
        raise ApiError(400, f"not batch fields: {', '.join(keys)} (an item may have them){hint}", keys[0])
    # Its items are submitted together: a batch the server can never hold at once is refused, not retried.
    if engine.max_queue is not None and count > engine.max_batch + engine.max_queue:
        message = (
            f"the batch has {count} items, more than the {engine.max_batch + engine.max_queue} requests this "
            f"server holds at once (--max-batch {engine.max_batch} running, --max-queue {engine.max_queue} waiting)"
        )
        raise ApiError(400, message, "items")


def batch_fields(body: BatchBody) -> dict[str, Any]:
    """The fields every item takes unless it sets its own (vllm-omni: the item's value where it
    sets one, else the batch's; serving_speech.py:2736-2765)."""
    return body.model_dump(exclude_unset=True, exclude={"items"})


def prepare_item(intake: Intake, shared: dict[str, Any], item: dict[str, Any]) -> Ask | str:
    """An item prepared as a single request with its body is (off the event loop), or its error."""
    taken = [key for key in BATCH_ONLY if key in item]
    if taken:
        return f"{taken[0]}: the batch decides it for every item (one model, no streaming)"
    try:
        return intake.prepare({**shared, **item})
    except ApiError as e:
        field = e.param.removeprefix("body.") if e.param else None  # an item's field, not the body's
        named = field is None or e.message.startswith(f"{field}:")
        return e.message if named else f"{field}: {e.message}"
    except Exception as e:  # a bug: the item's error (and logged); the other items still run
        log.exception("preparing a batch item failed")
        return f"internal error: {type(e).__name__}"


def submit_all(engine: LiveEngine, intake: Intake, asks: dict[int, Ask]) -> dict[int, Submission]:
    """Every prepared item into the running batch (`exchange.submit`, as any request), or none: if the
    engine refuses one (its queue is full, or it is stopping), the ones already in are withdrawn, the rest
    released, and the batch gets the 503."""
    submitted: dict[int, Submission] = {}
    for i, ask in asks.items():
        try:
            submitted[i] = submit(engine, intake, ask, stream=False)
        except ApiError:
            for done in submitted.values():
                done.cancel()
            for j in list(asks)[len(submitted) + 1 :]:
                intake.release(asks[j])
            raise
    return submitted


async def outcomes_of(connection: Request, submitted: dict[int, Submission], timeout_s: float | None):
    """Each submitted item's outcome (a result, an error, or the timeout's message), or GONE if the
    client disconnects first. Items still running then are cancelled, freeing their places."""
    arrivals = {i: asyncio.ensure_future(s.outcome()) for i, s in submitted.items()}
    answer = await until_disconnected(connection, asyncio.gather(*arrivals.values()), timeout_s)
    unfinished = {i for i, arrived in arrivals.items() if not arrived.done() or arrived.cancelled()}
    for i in unfinished:
        arrivals[i].cancel()
        submitted[i].cancel()
    if answer is GONE:
        return GONE
    return {i: timed_out(timeout_s) if i in unfinished else arrived.result() for i, arrived in arrivals.items()}


def item_results(
    prepared: list[Ask | str], outcomes: dict[int, SynthResult | BaseException | str], rate: int, channels: int
) -> list[dict[str, Any]]:
    """Each item's result in vllm-omni's shape (`index`, `status`, `audio_data`: base64 of the whole
    file, `media_type`, or `error`), with what the x-moss-* headers say of a single request."""
    results = []
    for index, ask in enumerate(prepared):
        if not isinstance(ask, Ask):
            results.append({"index": index, "status": "error", "error": ask})
            continue
        moss = {f"moss_{name}": value for name, value in request_facts(ask).items()}
        outcome = outcomes[index]
        if isinstance(outcome, str):  # timed out
            results.append({"index": index, "status": "error", "error": outcome, **moss})
        elif isinstance(outcome, BaseException):
            error = f"synthesis failed: {type(outcome).__name__}: {outcome}"
            results.append({"index": index, "status": "error", "error": error, **moss})
        else:
            audio = encode(outcome.pcm, rate, ask.response_format)
            results.append(
                {
                    "index": index,
                    "status": "success",
                    "audio_data": base64.b64encode(audio).decode("ascii"),
                    "media_type": MEDIA_TYPES[ask.response_format],
                    "usage": usage(ask, outcome),
                    **moss,
                    **{f"moss_{name}": value for name, value in result_facts(outcome).items()},
                    "moss_sample_rate": rate,
                    "moss_channels": channels,
                }
            )
    return results


def batch_response(results: list[dict[str, Any]]) -> dict[str, Any]:
    """vllm-omni's batch answer; keys whose value is null are left out, as it leaves them out
    (model_dump(exclude_none=True), api_server.py:1421-1424)."""
    succeeded = sum(r["status"] == "success" for r in results)
    return {
        "id": f"speech-batch-{uuid.uuid4().hex[:16]}",
        "results": [{k: v for k, v in r.items() if v is not None} for r in results],
        "total": len(results),
        "succeeded": succeeded,
        "failed": len(results) - succeeded,
    }
