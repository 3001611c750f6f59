"""The pieces of terminal UI that `moss synth`, `moss audit-determinism` and `moss bench` share, written
once (cli/common.py: the progress bar, the line that reports a re-send), and `moss bench --server`'s
options taken from the same groups as the other commands' (with_options), with one default each."""

import io

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

import moss_cli.cli.audit
import moss_cli.cli.bench
import moss_cli.cli.synth
from moss_cli.cli import common
from moss_cli.cli import server_options as srv
from moss_cli.cli.app import app
from moss_cli.errors import MossError
from moss_cli.remote.client import Retry

runner = CliRunner()
URL = "http://127.0.0.1:9"  # nothing listens there


@pytest.fixture
def terminal(monkeypatch):
    """The commands' stderr as a terminal, captured."""

    def console(interactive: bool) -> io.StringIO:
        out = io.StringIO()
        monkeypatch.setattr(common, "stderr", Console(file=out, force_terminal=interactive, width=100))
        monkeypatch.delenv("CI", raising=False)
        return out

    return console


def _params(command: str) -> dict:
    return {p.name: p for p in typer.main.get_command(app).commands[command].params}


def test_every_command_reports_a_re_send_with_the_one_retry_line(terminal):
    out = terminal(False)
    retry = Retry("r0", "synth", 2, "HTTP 503 [busy]")
    common.show_retry(retry)
    assert out.getvalue() == "retry: HTTP 503 [busy]; sending it again (attempt 2)\n"  # markup in it is text
    for command in (moss_cli.cli.synth, moss_cli.cli.audit, moss_cli.cli.bench):
        assert command.show_retry is common.show_retry
        assert "retry:" not in open(command.__file__).read()  # no printer of its own


def test_synth_and_bench_draw_the_one_progress_bar():
    for command in (moss_cli.cli.synth, moss_cli.cli.bench):
        assert command.progress_bar is common.progress_bar
        assert "rich.progress" not in open(command.__file__).read()


def test_the_progress_bar_for_a_person_and_its_phases_as_lines_otherwise(terminal):
    terminal(True)
    with common.progress_bar("synth") as bar:
        bar.start(3, 1)
        bar.advance("[r1]")  # a request id is text, not markup
        bar.phase("references")
        assert bar.progress.tasks[0].completed == 2 and bar.progress.tasks[0].total == 3
        assert bar.progress.tasks[0].description == "references"
    out = terminal(False)
    with common.progress_bar("bench", 8) as bar:
        bar.start(8)
        bar.advance("r0")
        bar.phase("warm-up: 2 request(s)")
    assert out.getvalue() == "bench: warm-up: 2 request(s)\n"  # no bar: each phase a line


def test_bench_takes_the_client_options_of_synth_and_audit_with_their_defaults():
    bench, synth, audit = _params("bench"), _params("synth"), _params("audit-determinism")
    for option in srv.CLIENT_OPTIONS:
        assert bench[option.name].opts == synth[option.name].opts == audit[option.name].opts
        assert bench[option.name].default == synth[option.name].default == audit[option.name].default
    assert bench["response_format"].default == "wav"


def test_bench_server_options_reach_the_server_bench(monkeypatch):
    import moss_cli.bench.server

    seen = []

    class Stop:
        def __init__(self, options, on_retry):
            seen.append(options)
            on_retry(Retry("r0", "bench", 2, "HTTP 503"))
            raise MossError("stopped before anything is sent")

    monkeypatch.setattr(moss_cli.bench.server, "ServerBench", Stop)
    result = runner.invoke(app, ["bench", "--server", URL])
    assert result.exit_code == 2 and "stopped before anything is sent" in result.output
    assert "retry: HTTP 503; sending it again (attempt 2)" in result.output
    defaults = seen[-1]
    assert (
        defaults.server.response_format == "wav" and defaults.path == "raw-stream" and defaults.server.timeout_s == 300
    )
    assert defaults.concurrency == (1, 8) and defaults.server.concurrency == 8  # in flight: the largest level
    assert defaults.arms == ("unseeded", "seeded") and defaults.frames is None and defaults.level == "bitwise"
    args = ["--concurrency", "2,4", "--response-format", "PCM", "--timeout", "5", "--retries", "1", "--api-key", "k"]
    args += ["--served-model", "m", "--arms", "seeded", "--frames", "6", "--no-stream", "--speech-max-clipped", "0.5"]
    runner.invoke(app, ["bench", "--server", URL, *args])
    given = seen[-1]
    assert given.server.response_format == "pcm" and given.server.timeout_s == 5 and given.server.retries == 1
    assert given.server.concurrency == 4 and given.concurrency == (2, 4) and given.server.model == "m"
    assert ("Authorization", "Bearer k") in given.server.headers and given.arms == ("seeded",)
    assert given.frames == 6 and given.path == "single" and given.speech.max_clipped == 0.5
    runner.invoke(app, ["bench", "--server", URL, "--path", "websocket"])
    assert seen[-1].path == "websocket" and seen[-1].serving_path.route.startswith("WebSocket /v1/audio/speech/stream")
    both = runner.invoke(app, ["bench", "--server", URL, "--path", "websocket", "--stream"])
    assert both.exit_code == 2 and "error: [--path]: give --path or --stream/--no-stream, not both" in both.output
    unknown = runner.invoke(app, ["bench", "--server", URL, "--path", "sse"])
    assert (
        unknown.exit_code == 2
        and "[--path]: expected one of single, raw-stream, websocket, got 'sse'" in unknown.output
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--response-format", "pcm"], "--response-format: only with --server (a running speech server)"),
        (["--timeout", "3", "--warmup", "1"], "--timeout: only with --server (a running speech server)"),
        (["--warmup", "1", "--level", "waveform"], "--warmup, --level: only with --server (a running speech server)"),
        (["--server", URL, "--batch", "2", "--no-pack", "--modes", "fast"], "--batch, --modes, --no-pack: only for "),
        (["--server", URL, "--device", "cpu"], "--device: only for the local engine, not with --server (the server's"),
    ],
)
def test_each_half_of_bench_refuses_the_others_options(args, message):
    result = runner.invoke(app, ["bench", *args])
    assert result.exit_code == 2 and result.output.startswith(f"error: {message}"), result.output


def test_the_local_bench_options_check_themselves():
    from pathlib import Path

    from moss_cli.bench import BenchOptions

    with pytest.raises(MossError, match="--model and --codec go together") as e:
        BenchOptions(model=Path("talker"))
    assert e.value.field == "--codec"
    with pytest.raises(MossError, match="use either --model/--codec or --random-weights"):
        BenchOptions(model=Path("talker"), codec=Path("codec"), random_weights="tiny")
