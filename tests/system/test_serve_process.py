"""`moss serve` as a real process: SIGTERM lets the requests in flight finish and exits 0, a
missing FastAPI or a taken port is a clear exit 2 (the load test: test_serve_load.py)."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from serve_helpers import local_synth, pcm_hash, serve_load

from moss_cli.speech_api import SPEECH_PATH

load = serve_load()
RECORDS = [
    {"id": f"r{i}", "text": f"Request number {i} is still streaming.", "seed": 20 + i, "max_new_frames": 60}
    for i in range(4)
]


@pytest.mark.slow  # a real process: about 5 s on a quiet machine
def test_sigterm_finishes_the_requests_in_flight_then_exits_0(tmp_path):
    local = local_synth(RECORDS, tmp_path / "local")
    port = load.free_port()
    url = f"http://127.0.0.1:{port}"
    process = load.start_server(port, tmp_path / "serve.log", "--max-batch", "4")
    try:
        load.wait_healthy(url, process)
        started = [threading.Event() for _ in RECORDS]
        bodies: dict[int, bytes | BaseException] = {}

        def stream(i: int) -> None:
            body = {
                "input": RECORDS[i]["text"],
                "seed": RECORDS[i]["seed"],
                "max_new_tokens": 60,
                "stream": True,
                "stream_format": "audio",
            }
            try:
                with httpx.stream("POST", url + SPEECH_PATH, json={**body, "response_format": "pcm"}, timeout=60) as r:
                    parts = r.iter_raw()
                    first = next(parts)
                    started[i].set()  # its first chunk is here: the request is in the engine
                    bodies[i] = first + b"".join(parts)
            except BaseException as e:  # reported below
                bodies[i] = e
                started[i].set()

        threads = [threading.Thread(target=stream, args=(i,)) for i in range(len(RECORDS))]
        for thread in threads:
            thread.start()
        for event in started:
            assert event.wait(60)
        process.send_signal(signal.SIGTERM)
        for thread in threads:
            thread.join(60)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    for i, record in enumerate(RECORDS):
        assert isinstance(bodies[i], bytes), bodies[i]
        assert pcm_hash(bodies[i], "pcm") == local[record["id"]]["pcm_sha256"]  # whole, and exactly right
    assert "moss serve: stopped" in (tmp_path / "serve.log").read_text()


@pytest.mark.slow  # a real process
def test_ctrl_c_stops_an_idle_server_with_exit_0(tmp_path):
    port = load.free_port()
    process = load.start_server(port, tmp_path / "serve.log")
    try:
        load.wait_healthy(f"http://127.0.0.1:{port}", process)
        process.send_signal(signal.SIGINT)
        assert process.wait(60) == 0
    finally:
        if process.poll() is None:
            process.kill()
    log = (tmp_path / "serve.log").read_text()
    assert "moss serve: stopped" in log and "Traceback" not in log


def test_without_fastapi_serve_exits_2_with_the_one_install_command(tmp_path):
    shadow = tmp_path / "shadow" / "fastapi"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named fastapi')\n")
    env = {"PYTHONPATH": f"{shadow.parent}:{load.HERE}", "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [sys.executable, "-m", "moss_cli", "serve"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2
    said = " ".join(result.stderr.split())
    assert "in a clone, bash scripts/setup.sh --serve" in said and "Traceback" not in said
    # The same one way in the README and the serve page.
    root = Path(__file__).resolve().parents[2]
    for page in (root / "README.md", root / "docs" / "serve.md"):
        assert "bash scripts/setup.sh --serve" in " ".join(page.read_text().split()), page


def test_a_taken_port_a_bad_host_or_a_missing_media_folder_is_exit_2_naming_the_option(tmp_path):
    from typer.testing import CliRunner

    from moss_cli.cli.app import app

    runner = CliRunner()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        result = runner.invoke(app, ["serve", "--port", str(taken.getsockname()[1])])
    assert result.exit_code == 2 and "cannot listen" in result.output and "[--port]" in result.output
    for host in ("256.1.1.1", "192.0.2.1"):  # not an address; an address of no interface here (TEST-NET-1)
        result = runner.invoke(app, ["serve", "--host", host, "--port", "0"])
        assert result.exit_code == 2 and "[--host]" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["serve", "--port", "0", "--allowed-media-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "--allowed-media-dir" in result.output


def test_help_imports_neither_torch_nor_fastapi():
    code = (
        "import sys; from moss_cli.cli.app import app\n"
        "try:\n    app(['serve', '--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted({'torch', 'fastapi', 'uvicorn'} & set(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60).stdout
    assert out.strip().endswith("[]")
