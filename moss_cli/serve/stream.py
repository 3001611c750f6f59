"""`/v1/audio/speech/stream`: vllm-omni 0.30.0's WebSocket speech stream (route: api_server.py:1696-1715;
handler: entrypoints/openai/serving_speech_stream.py; session.config: protocol/audio.py:556-638), for
voice agents that feed an LLM's text into TTS as it arrives.

The client sends `session.config` first (within 10 s), then `input.text` chunks; `input.done` flushes
them as one utterance (split_granularity "none") and the connection stays open; `session.close` ends
it, as do 30 s without a message. Each utterance is one request of the live engine with the body a
`POST /v1/audio/speech` would have (session.config's fields by name and the stripped text as `input`,
as serving_speech_stream.py:311-330 builds it), through the same checks (`Intake.prepare`), so it
gets bitwise the POST's audio: an unseeded one the deploy seed. Answers: `audio.start`, the audio (the
whole file in one binary frame; with stream_audio, raw PCM chunk by chunk), `audio.done` (with moss's
facts as `moss_*` keys, as a batch item carries them), `session.done`; problems are `{"type": "error"}`
in vllm-omni's words. moss serve splits no sentences: "sentence" and "clause" are refused by name."""

from __future__ import annotations

import asyncio
import json
from typing import Any, Literal

from fastapi import FastAPI, WebSocket, WebSocketDisconnect
from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError, model_validator
from starlette.concurrency import run_in_threadpool
from starlette.websockets import WebSocketState

from ..pipeline.live import LiveEngine
from ..speech_api import STREAM_PATH
from ..validation import INT64_MAX, INT64_MIN
from .audio import encode
from .errors import ApiError
from .exchange import Unfinished, request_facts, result_facts, submit
from .requests import Intake

CONFIG_TIMEOUT_S = 10.0  # serving_speech_stream.py:75-76
IDLE_TIMEOUT_S = 30.0
CONFIG_MESSAGE_CHARS = 4 * 1024 * 1024  # serving_speech_stream.py:79-80, 228-256
TEXT_MESSAGE_CHARS = 128 * 1024


class SessionConfig(BaseModel):
    """vllm-omni's `StreamingSpeechSessionConfig` (protocol/audio.py:556-638), field for field; fields
    it does not have are refused by name (it drops them: a typo must not pass silently)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    voice: str | None = Field(None, validation_alias=AliasChoices("voice", "speaker"))
    task_type: Literal["CustomVoice", "VoiceDesign", "Base"] | None = None
    language: str | None = None
    instructions: str | None = None
    response_format: Literal["wav", "pcm", "flac", "mp3", "opus"] = "wav"
    speed: float | None = Field(1.0, ge=0.25, le=4.0)
    max_new_tokens: int | None = Field(None, ge=1, le=INT64_MAX)
    initial_codec_chunk_frames: int | None = Field(None, ge=0, le=INT64_MAX)
    non_streaming_mode: bool | None = None
    ref_audio: str | None = None
    ref_text: str | None = None
    x_vector_only_mode: bool | None = None
    speaker_embedding: list[float] | None = Field(None, max_length=8192)
    stream_audio: bool = False
    word_timestamps: bool = False
    seed: int | None = Field(None, ge=INT64_MIN, le=INT64_MAX)
    split_granularity: Literal["none", "sentence", "clause"] = "none"

    @model_validator(mode="after")
    def _streamed_audio_is_pcm_at_speed_1(self) -> SessionConfig:
        """audio.py:624-638: stream_audio needs pcm and speed 1."""
        if self.stream_audio:
            if self.response_format != "pcm":
                raise ValueError(
                    "WebSocket streaming audio (stream_audio=true) requires response_format='pcm'. "
                    f"Got response_format='{self.response_format}'."
                )
            if self.speed is not None and self.speed != 1.0:
                raise ValueError("WebSocket stream_audio=true currently requires speed=1.0")
        return self

    def body(self, text: str) -> dict[str, Any]:
        """The POST body of an utterance: the fields the client set, `input` the text; stream_audio
        is a raw PCM stream (`stream_format: "audio"`)."""
        body = self.model_dump(exclude_unset=True, exclude={"stream_audio", "split_granularity"})
        body = {key: value for key, value in body.items() if key in type(self).model_fields}
        if self.stream_audio:
            body["stream_format"] = "audio"
        return {"input": text, **body}


def session_config(message: dict[str, Any], intake: Intake) -> SessionConfig | str:
    """A session.config message's config, or the error it answers (vllm-omni's words where it has them)."""
    try:
        config = SessionConfig(**{key: value for key, value in message.items() if key != "type"})
    except ValidationError as e:
        return f"Invalid session config: {e}"
    except TypeError as e:  # a key that is no identifier-like string cannot be a keyword
        return f"Invalid session config: {e}"
    if config.model_extra:
        return f"Invalid session config: not session.config fields: {', '.join(config.model_extra)}"
    if config.split_granularity != "none":
        return f"Invalid session config: split_granularity {config.split_granularity!r}: moss serve splits no text"
    if config.model and config.model != intake.model_name:
        return f"the model {config.model!r} does not exist; this server serves {intake.model_name!r}"
    return config


def read_message(raw: str) -> dict[str, Any] | str:
    """A client message, or why it is refused (serving_speech_stream.py:228-256)."""
    if len(raw) > CONFIG_MESSAGE_CHARS:
        return "WebSocket message too large"
    try:
        message = json.loads(raw)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's recursion limit
        return "Invalid JSON message"
    if not isinstance(message, dict):
        return "WebSocket messages must be JSON objects"
    if message.get("type") != "session.config" and len(raw) > TEXT_MESSAGE_CHARS:
        return "input.text message too large"
    return message


async def send_error(websocket: WebSocket, message: str) -> None:
    try:
        await websocket.send_json({"type": "error", "message": message})
    except Exception:  # the client is gone
        pass


class StreamSession:
    """One connection of the stream, as vllm-omni's handle_session runs it (serving_speech_stream.py:108-226):
    `run` reads its messages in turn, each type to its own method (`session_config`, `input_text`,
    `input_done`, `session_close`), with its order, errors and timeouts; an utterance is a request of the
    engine (`exchange.submit`), answered audio.start, its audio, audio.done. A method returns True where the
    session ends."""

    def __init__(self, websocket: WebSocket, engine: LiveEngine, intake: Intake, timeout_s: float | None) -> None:
        self.websocket, self.engine, self.intake, self.timeout_s = websocket, engine, intake, timeout_s
        self.rate, self.channels = engine.synth.codec_config.sampling_rate, engine.synth.codec_config.channels
        self.config: SessionConfig | None = None
        self.buffer, self.index = "", 0

    async def run(self) -> None:
        await self.websocket.accept()
        try:
            while not await self.next_message():
                pass
        except WebSocketDisconnect:
            pass
        except Exception as e:  # e.g. a binary frame, which receive_text() cannot read
            await send_error(self.websocket, f"Internal error: {type(e).__name__}: {e}")
        finally:
            await self.close()

    async def next_message(self) -> bool:
        """Read one message and handle it; True where the session ends."""
        try:
            wait_s = CONFIG_TIMEOUT_S if self.config is None else IDLE_TIMEOUT_S
            raw = await asyncio.wait_for(self.websocket.receive_text(), wait_s)
        except asyncio.TimeoutError:
            idle = "Idle timeout: no message received"
            return await self.error("Timeout waiting for session.config" if self.config is None else idle, end=True)
        message = read_message(raw)
        if isinstance(message, str):
            return await self.error(message, end=self.config is None)
        kind = message.get("type")
        if kind == "session.config":
            return await self.session_config(message)
        if self.config is None:
            return await self.error(f"Expected session.config, got: {kind}", end=True)
        handler = {"input.text": self.input_text, "input.done": self.input_done, "session.close": self.session_close}
        if kind not in handler:
            return await self.error(f"Unknown message type: {kind}")
        return await handler[kind](message)

    async def error(self, message: str, end: bool = False) -> bool:
        await send_error(self.websocket, message)
        return end

    async def session_config(self, message: dict[str, Any]) -> bool:
        """The session's fields, replaced whole (serving_speech_stream.py:148-161), between utterances only."""
        if self.buffer:
            return await self.error(
                "session.config cannot be applied while an utterance is in progress; send input.done first"
            )
        new = session_config(message, self.intake)
        if isinstance(new, str):
            return await self.error(new, end=self.config is None)
        self.config = new
        return False

    async def input_text(self, message: dict[str, Any]) -> bool:
        text = message.get("text", "")
        if not isinstance(text, str):
            return await self.error("input.text requires a string value")
        self.buffer += text
        return False

    async def input_done(self, message: dict[str, Any]) -> bool:
        """The utterance so far, spoken (a blank one is no request: speech_text_splitter.py:195-202)."""
        said = self.buffer.strip()
        if said:
            await self.utterance(said)
        done = {"type": "session.done", "utterance_index": self.index, "total_sentences": int(bool(said))}
        await self.websocket.send_json(done)
        self.buffer, self.index = "", self.index + 1
        return False

    async def session_close(self, message: dict[str, Any]) -> bool:
        await self.websocket.close()
        return True

    async def utterance(self, text: str) -> None:
        """audio.start, the audio, audio.done (serving_speech_stream.py:274-421); a failure is an error
        between them, in vllm-omni's words ("Generation failed for utterance U, sentence 0: ...")."""
        config, index, websocket = self.config, self.index, self.websocket
        start = {"type": "audio.start", "utterance_index": index, "sentence_index": 0, "sentence_text": text}
        await websocket.send_json({**start, "format": config.response_format})
        done: dict[str, Any] = {"type": "audio.done", "utterance_index": index, "sentence_index": 0}
        sent, problem = 0, None
        try:
            ask = await run_in_threadpool(self.intake.prepare, config.body(text))
            done.update({f"moss_{name}": value for name, value in request_facts(ask).items()})
            submitted = submit(self.engine, self.intake, ask, stream=config.stream_audio)
            async for item in submitted.outputs(self.timeout_s):
                if isinstance(item, bytes):
                    sent += len(item)
                    await websocket.send_bytes(item)
                    continue
                done.update({f"moss_{name}": value for name, value in result_facts(item).items()})
                done.update(moss_sample_rate=self.rate, moss_channels=self.channels)
                if not config.stream_audio:
                    audio = await run_in_threadpool(encode, item.pcm, self.rate, ask.response_format)
                    sent = len(audio)
                    await websocket.send_bytes(audio)
        except ApiError as e:
            problem = e.message
        except Unfinished as e:
            problem = str(e)
        if problem is not None:
            error = {"type": "error", "message": f"Generation failed for utterance {index}, sentence 0: {problem}"}
            if sent:
                error.update(partial_audio=True, action="discard")
            await websocket.send_json(error)
        await websocket.send_json({**done, "total_bytes": sent, "error": problem is not None})

    async def close(self) -> None:
        """End a session the handler left open: newer FastAPI/uvicorn releases close the socket of an
        endpoint that returns, older ones (as old as the serve extra allows) leave the client waiting."""
        if self.websocket.application_state == WebSocketState.CONNECTED:
            try:
                await self.websocket.close()
            except Exception:  # the client is gone
                pass


def add_stream_route(app: FastAPI, engine: LiveEngine, intake: Intake, request_timeout_s: float | None) -> None:
    @app.websocket(STREAM_PATH)
    async def speech_stream(websocket: WebSocket) -> None:
        await StreamSession(websocket, engine, intake, request_timeout_s).run()
