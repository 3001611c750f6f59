"""SIGTERM stops a `--server` command within seconds, whatever the server does, keeping what finished:
`synth` keeps the finished files (exit 143, resumable), the audit writes the report of what it
compared before, marked incomplete (exit 143)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from speech_servers import http10_speech_server  # tests/ is on sys.path

pytestmark = pytest.mark.slow  # real processes, real signals


def _moss(*args) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "moss_cli", *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _when(condition, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the command ended or took too long: {proc.communicate()}")
        time.sleep(0.05)


def _terminate(proc: subprocess.Popen) -> tuple[str, float]:
    proc.send_signal(signal.SIGTERM)
    began = time.monotonic()
    _, stderr = proc.communicate(timeout=30)
    return stderr, time.monotonic() - began


def test_synth_on_a_hung_server_stops_on_sigterm_and_keeps_what_finished(tmp_path):
    requests = tmp_path / "r.jsonl"
    rows = [{"id": f"r{i}", "text": f"Request {i}.", "seed": i, "max_new_frames": 4} for i in range(2)]
    requests.write_text("".join(json.dumps(row) + "\n" for row in rows))
    served: list = []
    with http10_speech_server(hang_after=1, served=served) as url:
        proc = _moss(
            "synth", requests, "--server", url, "--concurrency", "1", "--deadline", "600", "-o", tmp_path / "o"
        )
        _when(lambda: served and list((tmp_path / "o").glob("*.wav")), proc)
        stderr, took = _terminate(proc)
    assert proc.returncode == 143 and took < 10, (proc.returncode, took, stderr)
    assert "run the same command again to resume" in stderr
    assert [p.name for p in (tmp_path / "o").glob("*.wav")] == ["r0.wav"]


def test_an_audit_on_a_hung_server_stops_on_sigterm_with_its_partial_report(tmp_path):
    served: list = []
    report = tmp_path / "audit.json"
    # The voice check (1 request), the reference (8) and the repeat (8) are answered; the concurrent run hangs.
    with http10_speech_server(hang_after=17, served=served) as url:
        proc = _moss(
            "audit-determinism", "--server", url, "--scenarios", "repeat,concurrent", "--deadline", "600",
            "--stagger-ms", "5", "--json", report,
        )  # fmt: skip
        _when(lambda: len(served) >= 17, proc)
        time.sleep(0.5)  # the concurrent run's requests are in flight, unanswered
        stderr, took = _terminate(proc)
    assert proc.returncode == 143 and took < 10, (proc.returncode, took, stderr)
    written = json.loads(report.read_text())
    assert written["summary"]["incomplete"]["error"] == "interrupted (signal 15)"
    assert written["summary"]["incomplete"]["not_run"] == ["concurrent"]
    assert written["summary"]["scenarios"] == {"repeat": {"pass": 8}}
