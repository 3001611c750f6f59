"""`moss serve --api-key`: every route but /health needs `Authorization: Bearer KEY` (401 in the API's
error shape without it), the key shows nowhere, and the `--server` clients send it from an option or
from MOSS_API_KEY."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from serve_helpers import running
from typer.testing import CliRunner
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from moss_cli.cli.app import app
from moss_cli.pipeline import SynthOptions
from moss_cli.remote.settings import ServerOptions
from moss_cli.remote.speech_stream import SpeechStream, stream_url
from moss_cli.speech_api import ENVIRONMENT_PATH, HEALTH_PATH, MODELS_PATH, SPEECH_PATH

KEY = "sk-test-5Zr9q"
FASTAPI_DOCS = ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
BODY = {"input": "A request with its own seed.", "seed": 4, "max_new_tokens": 6}


@pytest.fixture(scope="module")
def keyed():
    with running(SynthOptions(device="cpu"), api_key=KEY) as (url, serving):
        yield url, serving


def _routes(serving) -> list[tuple[str, str]]:
    """Every route the app serves, with a method it answers."""
    return [
        (route.path, sorted(route.methods)[0])
        for route in serving.app.routes
        if getattr(route, "methods", None)
        and route.path not in ("/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc")
    ]


def test_every_route_but_health_refuses_a_request_without_the_key(keyed):
    url, serving = keyed
    routes = _routes(serving)
    assert {SPEECH_PATH, MODELS_PATH, ENVIRONMENT_PATH, HEALTH_PATH} <= {path for path, _ in routes}
    for path, method in routes:
        for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
            answer = httpx.request(method, url + path, headers=headers, json=BODY, timeout=60)
            if path == HEALTH_PATH:
                assert answer.status_code == 200
                continue
            assert answer.status_code == 401, (path, headers)
            assert answer.headers["www-authenticate"] == "Bearer"
            error = answer.json()["error"]
            assert error["code"] == 401 and error["param"] is None and "Authorization: Bearer" in error["message"]
            assert KEY not in answer.text
    # Unknown paths too: the key is checked before routing.
    assert httpx.get(url + "/no/such/path", timeout=10).status_code == 401


def test_the_websocket_stream_needs_the_key_before_the_upgrade(keyed):
    """No session opens without the key: the upgrade itself is answered 401 in the API's error shape
    (as vLLM's middleware answers it), so no session.config is ever read."""
    url, _ = keyed

    async def upgrade(headers: dict) -> InvalidStatus:
        with pytest.raises(InvalidStatus) as refused:
            async with connect(stream_url(ServerOptions(url)), additional_headers=headers, open_timeout=10):
                pass
        return refused.value

    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": KEY}):
        response = asyncio.run(upgrade(headers)).response
        assert response.status_code == 401, headers
        assert response.headers["www-authenticate"] == "Bearer"
        error = json.loads(response.body)["error"]
        assert error["code"] == 401 and "Authorization: Bearer" in error["message"]
        assert KEY not in response.body.decode()

    async def speak(options: ServerOptions):
        async with SpeechStream(options, {"seed": 4, "max_new_tokens": 6}) as stream:
            return await stream.speak("u0", [BODY["input"]])

    keyed_options = ServerOptions(url, headers=(("Authorization", f"Bearer {KEY}"),), timeout_s=60)
    reply = asyncio.run(speak(keyed_options))
    assert len(reply.pcm) > 0 and reply.seed == 4


def test_the_ready_line_says_what_serves_how_and_where(keyed):
    _, serving = keyed
    said = serving.ready("127.0.0.1", 8091)
    assert said.startswith("moss serve: ") and said.endswith("listening on http://127.0.0.1:8091")
    assert "(batch-invariant, " in said and "API key required" in said and "legacy" not in said
    assert KEY not in said


def test_serve_help_names_every_route_the_app_serves(keyed):
    _, serving = keyed
    said = " ".join(CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "80"}).output.split())
    served = {route.path for route in serving.app.routes if route.path not in FASTAPI_DOCS}
    assert served >= {SPEECH_PATH, "/v1/audio/speech/batch", "/v1/audio/speech/stream", ENVIRONMENT_PATH}
    assert all(path in said for path in served), (served, said)


def test_with_the_key_the_server_answers_and_never_shows_the_key(keyed):
    url, _ = keyed
    auth = {"Authorization": f"Bearer {KEY}"}
    assert httpx.post(url + SPEECH_PATH, json=BODY, headers=auth, timeout=60).status_code == 200
    environment = httpx.get(url + ENVIRONMENT_PATH, headers=auth, timeout=60)
    assert environment.status_code == 200 and KEY not in environment.text
    assert httpx.get(url + MODELS_PATH, headers=auth, timeout=60).status_code == 200


def test_the_clients_send_the_key_from_the_option_or_the_environment(keyed, tmp_path, monkeypatch):
    url, _ = keyed
    requests = tmp_path / "r.jsonl"
    requests.write_text(json.dumps({"id": "a", "text": "A request with its own seed.", "seed": 4, "max_new_frames": 6}))
    runner = CliRunner()
    audit = ["audit-determinism", str(requests), "--server", url, "--scenarios", "websocket", "--stagger-ms", "5"]
    refused = runner.invoke(app, audit)
    assert refused.exit_code == 2 and "HTTP 401" in refused.output
    report = tmp_path / "audit.json"
    passed = runner.invoke(app, [*audit, "--api-key", KEY, "--json", str(report)])
    assert passed.exit_code == 0, passed.output
    assert KEY not in passed.output and KEY not in report.read_text()
    audited = json.loads(report.read_text())
    assert "--api-key '***'" in audited["options"]["command"]
    assert audited["server"]["paths"]["websocket"]["passed"] is True, audited["server"]["paths"]["websocket"]
    monkeypatch.setenv("MOSS_API_KEY", KEY)
    out = tmp_path / "out"
    synth = runner.invoke(app, ["synth", str(requests), "--server", url, "--out", str(out)])
    assert synth.exit_code == 0, synth.output
    assert all(KEY not in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix != ".wav")
    both = runner.invoke(
        app, ["synth", str(requests), "--server", url, "--out", str(out), "--header", "Authorization: x"]
    )
    assert both.exit_code == 2 and "give the key once" in both.output


def test_an_empty_key_is_refused():
    from moss_cli.errors import MossError
    from moss_cli.serve.server import prepare

    with pytest.raises(MossError, match="--api-key"):
        prepare(SynthOptions(device="cpu"), api_key="  ")


@pytest.mark.parametrize("command", [["synth", "REQUESTS"], ["audit-determinism"]])
def test_server_options_without_a_server_are_refused(command, tmp_path, monkeypatch):
    requests = tmp_path / "r.jsonl"
    requests.write_text('{"text": "x"}\n')
    argv = [str(requests) if word == "REQUESTS" else word for word in command]
    result = CliRunner().invoke(
        app, [*argv, "--api-key", KEY, "--concurrency", "3", "-o" if "synth" in argv else "--json", str(tmp_path / "o")]
    )
    assert result.exit_code == 2 and "--concurrency, --api-key: only with --server" in " ".join(result.output.split())
    assert KEY not in result.output
    monkeypatch.setenv("MOSS_API_KEY", KEY)  # set for servers: not an error for a local run
    result = CliRunner().invoke(app, ["synth", str(requests), "--dry-run", "-o", str(tmp_path / "o2")])
    assert result.exit_code == 0, result.output
