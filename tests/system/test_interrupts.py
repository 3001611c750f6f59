"""Killed and interrupted runs: no partial files, clean exits, and a resume that completes the job."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

TIMING = ["wall_s", "batch_size_seen"]  # depend on the run, not on the outputs

pytestmark = pytest.mark.slow  # real processes, real signals


@pytest.fixture(scope="module")
def requests(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("req") / "many.jsonl"
    path.write_text(
        "".join(
            f'{{"id": "r{i:02d}", "text": "Request {i} of a long job.", "seed": {i}, "max_new_frames": 20}}\n'
            for i in range(16)
        )
    )
    return path


def _cmd(requests: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "moss_cli", "synth", str(requests), "--out", str(out), "--max-batch", "2"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "CI": "1"}


def _start(requests: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen(_cmd(requests, out), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for_files(out: Path, count: int, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.is_dir() and len(list(out.glob("*.wav"))) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"synth ended before {count} files existed: {proc.stderr.read()}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("timed out waiting for output files")


def _finish(requests: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(_cmd(requests, out), env=_env(), capture_output=True, text=True, timeout=300)


def _outputs(out: Path) -> tuple[dict, pd.DataFrame]:
    files = {p.name: p.read_bytes() for p in sorted(out.glob("*.wav"))}
    manifest = pd.read_csv(out / "manifest.csv", dtype={"id": str}).drop(columns=TIMING)
    return files, manifest


@pytest.fixture(scope="module")
def uninterrupted(requests, tmp_path_factory) -> tuple[dict, pd.DataFrame]:
    out = tmp_path_factory.mktemp("clean") / "out"
    done = _finish(requests, out)
    assert done.returncode == 0, done.stderr
    return _outputs(out)


def test_sigkill_mid_run_then_resume_gives_the_same_files_and_manifest(requests, tmp_path, uninterrupted):
    out = tmp_path / "out"
    proc = _start(requests, out)
    _wait_for_files(out, 5, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    finished_before = len(list(out.glob("*.wav")))
    assert finished_before < 16
    resumed = _finish(requests, out)
    assert resumed.returncode == 0, resumed.stderr
    assert not list(out.glob(".*.tmp-*"))
    files, manifest = _outputs(out)
    clean_files, clean_manifest = uninterrupted
    assert files.keys() == clean_files.keys() and all(files[k] == clean_files[k] for k in files)
    pd.testing.assert_frame_equal(manifest, clean_manifest)


def test_sigint_stops_cleanly_with_exit_130_and_resume_completes(requests, tmp_path, uninterrupted):
    out = tmp_path / "out"
    proc = _start(requests, out)
    _wait_for_files(out, 3, proc)
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "interrupted" in stderr
    assert not list(out.glob(".*.tmp-*"))  # no temporary file left behind
    partial = pd.read_csv(out / "manifest.csv", dtype={"id": str})
    assert 0 < len(partial) < 16
    assert {p.name for p in out.glob("*.wav")} == set(partial["file"])  # every finished file is in the manifest
    assert _finish(requests, out).returncode == 0
    files, manifest = _outputs(out)
    pd.testing.assert_frame_equal(manifest, uninterrupted[1])


def test_sigterm_exits_143(requests, tmp_path):
    out = tmp_path / "out"
    proc = _start(requests, out)
    _wait_for_files(out, 2, proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    assert not list(out.glob(".*.tmp-*"))
