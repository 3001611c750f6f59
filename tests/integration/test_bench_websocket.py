"""`moss bench --server` along the WebSocket stream: every request an utterance (its text in chunks)
on a session of its own, checked against the same utterance alone, with the stream's time to first
audio. Against vllm-omni 0.30.0's double before the deploy-seed fix the unseeded utterances vary
under load; after it every one holds. Every server binds 127.0.0.1."""

from pathlib import Path

from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni  # tests/ is on sys.path

from moss_cli.bench.server import ServerBench, ServerBenchOptions
from moss_cli.remote.settings import ServerOptions

DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42, as the double's


def _bench(url: str, path: str = "websocket"):
    options = ServerBenchOptions(
        ServerOptions(url=url), concurrency=(3,), num_requests=6, warmup=1, frames=6, deploy=DEPLOY, path=path
    )
    return ServerBench(options).run()


def test_the_released_double_varies_the_unseeded_utterances_under_load():
    engine = FakeMossLocalEngine(fixed=False)
    with serving_vllm_omni(engine) as url:
        report = _bench(url)
    assert not report.passed
    assert {(c.arm, c.check) for c in report.failures} == {("unseeded", "varied")}
    assert {c.check for c in report.responses if c.arm == "seeded"} == {"identical"}
    setup = report.setup
    assert setup["path"] == "websocket" and setup["route"].startswith("WebSocket /v1/audio/speech/stream")
    # 8 references (4 of them with a seed), 1 warm-up, 2 arms x 6 under load: every one an utterance.
    assert setup["websocket_utterances"] == 2 * 8 + 1 + 2 * 6
    assert setup["http_requests"] == 1  # the reference-voice probe only


def test_the_fixed_double_holds_every_utterance_and_times_its_first_audio():
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        report = _bench(url)
    assert report.passed, report.as_dict()["summary"]
    assert {c.check for c in report.responses} == {"identical"}
    assert all(c.audio_ttfp_s is not None and 0 < c.audio_ttfp_s <= c.latency_s for c in report.responses)
    assert report.setup["stream"] == "WebSocket utterances (text in chunks, a session each)"


def test_the_command_line_benches_the_websocket_path(tmp_path):
    from typer.testing import CliRunner

    from moss_cli.cli.app import app

    out = tmp_path / "bench.json"
    args = ["--concurrency", "2", "--num-requests", "4", "--warmup", "0", "--frames", "4", "--deploy", str(DEPLOY)]
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        result = CliRunner().invoke(app, ["bench", "--server", url, "--path", "websocket", "--json", str(out), *args])
    assert result.exit_code == 0, result.output
    assert "wav WebSocket utterances" in " ".join(result.output.split())
    assert '"path": "websocket"' in out.read_text()
