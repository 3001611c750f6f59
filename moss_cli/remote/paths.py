"""The ways a speech server answers a request (its serving paths), each named once.

vllm-omni 0.30.0 serves speech five ways (paths: the vllm_omni package of its wheel), and `moss serve`
the same five:
- the single route, `POST /v1/audio/speech` with one body answered whole;
- server-sent events, the same route with `stream: true` (entrypoints/openai/protocol/audio.py:330-331);
- raw audio chunks, the same route with `stream_format: "audio"` (audio.py:327-328; `stream` then
  changes nothing but log lines, serving_speech.py:2683-2725);
- the batch route, `POST /v1/audio/speech/batch`, items in one call, none with a seed (audio.py:446-463);
- the WebSocket stream, `/v1/audio/speech/stream` (api_server.py:1696-1715): a session.config, then
  each utterance's text in chunks. With `split_granularity` "none" an utterance is the request
  its handler builds from the config's fields and the flushed text (serving_speech_stream.py:311-330),
  generated as a non-streaming POST is (`_generate_audio_bytes`, serving_speech_stream.py:382-386):
  the same request, seed rule included, as the single route's body with those fields.

A `ServingPath` is one of them: its name (the audit's path table, JSON and JUnit use it), its route for
people, its transport, how a body asks for it, and the audit scenario that audits it. `ServingPath.speak`
sends a request's body along a path (`utter`: on a WebSocket session kept open); the bench and the
audit both ask through it, so a path's request is built one way. The batch route takes several
requests in one call (`SpeechClient.speak_batch`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Mapping

from .. import speech_api

if TYPE_CHECKING:  # the client reads audio with numpy and torch; the audit's --help reads these paths
    from .client import SpeechClient
    from .reply import Reply
    from .speech_stream import SpeechStream

HTTP, BATCH_CALL, WEBSOCKET_SESSION = "http", "batch", "websocket"
STREAMED_FORMATS = ("wav", "pcm")  # what vllm-omni streams (audio.py:336-343)


@dataclass(frozen=True, eq=False)  # one of each: a path is itself, compared and hashed by identity
class ServingPath:
    name: str
    route: str  # for people: the route and how it is asked
    transport: str  # HTTP (one body, one answer), BATCH_CALL (items in one call) or WEBSOCKET_SESSION
    scenario: str | None  # the audit scenario that audits it (None: the single route, which every scenario uses)
    refused: str  # what the server refuses when it refuses this path ("streaming", ...), for a skip's reason
    marks: Mapping[str, Any] = field(default_factory=dict)  # the fields a single body gets to ask for this path
    # The audit's run of an HTTP path's scenario: every audited request sent this way at once ({concurrency}).
    run: str = "sent-{concurrency}-at-once"
    # `moss bench --server --path NAME`: what its answers are, (the table title's word, the setup's words);
    # None: a path the bench does not time (events add base64 and framing to what it would time as audio).
    answers: tuple[str, str] | None = None

    @property
    def streamed(self) -> bool:
        """Whether the audio comes as it is made (a stream's time to first audio means something)."""
        return bool(self.marks) or self.transport == WEBSOCKET_SESSION

    def body(self, body: dict[str, Any]) -> dict[str, Any]:
        """A single request's body (`speech_api.body_from_request`) as this path sends it. A stream's
        format is wav or pcm, the ones vllm-omni streams: any other becomes wav."""
        marked = {**body, **self.marks}
        if self.marks and marked.get("response_format") not in STREAMED_FORMATS:
            marked["response_format"] = "wav"
        return marked

    async def refusal(
        self, client: SpeechClient, request: str, body: dict[str, Any], context: str, what: str | None = None
    ) -> str | None:
        """The check before use: why the server refuses this path (`what` it refuses, in words, else
        the path's), in its words, from its answer to one short request sent this way; None where it
        answers with audio. A 4xx is a refusal, as a WebSocket stream the server does not serve is;
        any other failure is raised."""
        from .client import ServerError
        from .speech_stream import StreamUnavailable

        try:
            if self.transport == BATCH_CALL:
                await self.speak_items(client, [request], [body], context)
            else:
                await self.speak(client, request, body, context)
        except StreamUnavailable as e:
            return f"the server does not serve {what or self.refused} ({speech_api.STREAM_PATH}): {e.reason}"
        except ServerError as e:
            if e.status is None or not 400 <= e.status < 500:
                raise
            if self.transport == BATCH_CALL and e.status in (404, 405):
                return f"the server has no batch route (POST {speech_api.BATCH_PATH}: HTTP {e.status}): {e.message}"
            return f"the server refuses {what or self.refused}: {e.message}"
        return None

    async def speak_items(
        self,
        client: SpeechClient,
        requests: list[str],
        bodies: list[dict[str, Any]],
        context: str,
        started: float | None = None,
    ) -> list[Reply]:
        """Requests' single bodies as the items of one call of the batch route, in vllm-omni's shape
        (`speech_api.batch_body`: the first body's model and format for the call, no seed in an item)."""
        first = bodies[0]
        batch = speech_api.batch_body(bodies, model=first.get("model"), response_format=first["response_format"])
        return await client.speak_batch(requests, batch, context, started)

    async def speak(
        self, client: SpeechClient, request: str, body: dict[str, Any], context: str, started: float | None = None
    ) -> Reply:
        """One request's audio along this path (not the batch route's, whose requests go several to a
        call: `SpeechClient.speak_batch`), read as it comes where it streams. Over the WebSocket
        stream it is one utterance on a session of its own (`utter`: on one kept open)."""
        if self.transport == HTTP:
            return await client.speak(request, self.body(body), context, started, timed=self.streamed)
        if self.transport != WEBSOCKET_SESSION:
            raise ValueError(f"{self.name}: a path whose requests go {self.transport}, not one by one")
        from .speech_stream import SpeechStream

        async with SpeechStream(client.options, speech_api.session_config(body)[0], context) as stream:
            return await utter(client, stream, request, body, started)


SINGLE = ServingPath(
    "single",
    "POST /v1/audio/speech, one body",
    HTTP,
    None,
    "speech requests",
    answers=("bodies", "whole bodies"),
)
SSE = ServingPath(
    "sse",
    "POST /v1/audio/speech with stream: true (server-sent events)",
    HTTP,
    "streaming",
    "streaming",
    MappingProxyType({"stream": True}),
    run="streamed-{concurrency}-at-once",
)
RAW_STREAM = ServingPath(
    "raw-stream",
    'POST /v1/audio/speech with stream_format: "audio" (raw chunks)',
    HTTP,
    "raw-stream",
    "raw audio streams",
    MappingProxyType({"stream_format": "audio"}),
    run="raw-audio-streamed-{concurrency}-at-once",
    answers=("streamed", "raw audio chunks (stream_format audio)"),
)
BATCH = ServingPath(
    "batch", "POST /v1/audio/speech/batch, items in one call (no seed)", BATCH_CALL, "batch", "the batch route"
)
WEBSOCKET = ServingPath(
    "websocket",
    "WebSocket /v1/audio/speech/stream, each utterance's text in chunks",
    WEBSOCKET_SESSION,
    "websocket",
    "the WebSocket stream",
    answers=("WebSocket utterances", "WebSocket utterances (text in chunks, a session each)"),
)
# Every path, each named once: the audit's path scenarios and path table, the bench's --path and every report read
# this (a path added here, with its scenario, shows in all of them).
PATHS = {path.name: path for path in (SINGLE, SSE, RAW_STREAM, BATCH, WEBSOCKET)}


def benched() -> dict[str, ServingPath]:
    """The paths `moss bench --server --path` times: those with words for their answers."""
    return {name: path for name, path in PATHS.items() if path.answers is not None}


def scenario_path(scenario: str) -> ServingPath | None:
    """The path whose audit scenario this is (None: a scenario of compositions, not of a path)."""
    return next((path for path in PATHS.values() if path.scenario == scenario), None)


async def utter(
    client: SpeechClient, stream: SpeechStream, request: str, body: dict[str, Any], started: float | None = None
) -> Reply:
    """A request's body as one utterance on an open session (`stream`), under the session.config its
    fields make (sent first where the session has another: how one connection carries requests with
    different fields), its text in chunks; counted among the client's requests in flight. Never
    re-sent: a session is no idempotent call."""
    from .speech_stream import text_chunks

    config, _ = speech_api.session_config(body)
    async with client.in_flight() as slot:
        await stream.configure(config)
        reply = await stream.speak(request, text_chunks(body["input"]))
    client.utterances += 1
    return slot.stamp(reply, started)
