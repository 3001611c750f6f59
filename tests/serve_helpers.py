"""Helpers for the `moss serve` tests: a real uvicorn server on 127.0.0.1 (in this process, on a
free port, stopped by the fixture), requests to the speech route, response bodies as PCM, and
`moss synth` results to compare."""

from __future__ import annotations

import base64
import io
import json
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import numpy as np
import soundfile as sf
from cli_runs import write_rows

from moss_cli.io.audio import pcm_sha256
from moss_cli.jobs.local import synthesize
from moss_cli.pipeline import SynthOptions
from moss_cli.serve.audio import wav_stream_header
from moss_cli.serve.server import Serving, listen, prepare
from moss_cli.speech_api import HEALTH_PATH, SPEECH_PATH

START_S = 30.0  # bounded waits: a server that does not come up or go down fails the test


@contextmanager
def running(options: SynthOptions, **start_options):
    """Start a server in this process; yield (base URL, Serving); stop it and its engine."""
    import uvicorn

    serving: Serving = prepare(options, **start_options).start()
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(serving.app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        deadline = time.monotonic() + START_S
        while not server.started:
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)
        assert httpx.get(url + HEALTH_PATH, timeout=5).status_code == 200
        yield url, serving
    finally:
        server.should_exit = True
        thread.join(START_S)
        assert not thread.is_alive(), "the server did not stop"
        assert serving.close(START_S), "the engine did not stop"


def post_speech(url: str, body, *, timeout: float = 60, expect: int | None = None) -> httpx.Response:
    """POST `body` as JSON to the speech route of the server at `url`. json.dumps writes it, escaping
    what httpx would refuse to encode (a lone surrogate is legal JSON); no proxy from the environment
    (the server is on 127.0.0.1). With `expect`, the answer must have that status."""
    content = json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    response = httpx.post(url + SPEECH_PATH, content=content, headers=headers, timeout=timeout, trust_env=False)
    if expect is not None:
        assert response.status_code == expect, response.text
    return response


def pcm_of(content: bytes, response_format: str, *, streamed: bool = False, channels: int = 2) -> np.ndarray:
    """The int16 samples [samples, channels] of a response body."""
    if response_format == "pcm":
        return np.frombuffer(content, dtype="<i2").reshape(-1, channels)
    if streamed:  # a streaming WAV's sizes say "unknown": the samples are everything after the header
        header = wav_stream_header(48_000, channels)
        assert content[: len(header)] == header
        return np.frombuffer(content[len(header) :], dtype="<i2").reshape(-1, channels)
    samples, _ = sf.read(io.BytesIO(content), dtype="int16", always_2d=True)
    return samples


def sse_events(content: bytes) -> list[tuple[str, dict]]:
    """A server-sent event stream as (event name, its JSON data), in order; every event must be
    the two lines `event:` and `data:`, as vllm-omni writes them."""
    text = content.decode("utf-8")
    assert text.endswith("\n\n"), text[-200:]
    events = []
    for block in text[:-2].split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block[:200]
        events.append((name[len("event: ") :], json.loads(data[len("data: ") :])))
    return events


def sse_audio(content: bytes) -> tuple[list[bytes], dict]:
    """The audio pieces of an SSE stream, in order, and its `speech.audio.done` event; the
    stream must be deltas, then done (vllm-omni's order and keys)."""
    events = sse_events(content)
    names = [name for name, _ in events]
    assert names == ["speech.audio.delta"] * (len(events) - 1) + ["speech.audio.done"], names
    for name, data in events:
        assert data["type"] == name
    assert all(list(data) == ["type", "audio", "response_format"] for _, data in events[:-1])
    assert list(events[-1][1]) == ["type", "usage"]
    return [base64.b64decode(data["audio"]) for _, data in events[:-1]], events[-1][1]


def pcm_hash(content: bytes, response_format: str, **kwargs) -> str:
    return pcm_sha256(pcm_of(content, response_format, **kwargs))


def local_synth(records: list[dict], folder: Path, deploy: Path | None = None) -> dict[str, dict]:
    """`moss synth` of the same requests: manifest rows by id."""
    path = write_rows(folder / "requests.jsonl", records)
    summary = synthesize(path, folder / "out", SynthOptions(device="cpu", deploy=deploy))
    return {row["id"]: row for row in summary.rows}


def serve_load():
    """benchmarks/serve_load.py as a module: its process helpers and the load test itself."""
    import importlib.util
    import sys

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "serve_load.py"
    spec = importlib.util.spec_from_file_location("serve_load", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("serve_load", module)  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


@contextmanager
def running_long(folder: Path, *, max_batch: int, **start_options):
    """A server whose requests run to their frame budget (a stop head that never fires), with room
    for 3800 frames: long enough to outlast any wait a test sets, on a fast machine too (the tiny
    recipe's 200 frames take well under a second there). Yields (base URL, Serving)."""
    import dataclasses

    recipe = Path(__file__).resolve().parent.parent / "recipes" / "moss_tts_local_tiny.yaml"
    deploy = folder / "long.yaml"
    deploy.write_text(
        f"base_config: {recipe}\n"
        "stages:\n  - stage_id: 0\n    max_model_len: 4096\n    default_sampling_params: {max_tokens: 3800}\n"
    )
    with running(SynthOptions(device="cpu", max_batch=max_batch, deploy=deploy), **start_options) as (url, serving):
        generation = serving.synth.generation
        serving.synth.generation = lambda p: dataclasses.replace(generation(p), ignore_stop=True)
        yield url, serving
