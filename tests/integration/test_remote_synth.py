"""`moss synth --server`: the same output directory, manifest and resume as local synthesis, with
the server doing the synthesis."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import soundfile as sf
from cli_runs import write_rows
from speech_servers import RATE, Behaviour, serving, synthesize  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.io.audio import pcm_sha256
from moss_cli.io.manifest import COLUMNS, write_manifest

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[2]


def _requests(tmp_path: Path, n: int, frames: int = 3) -> Path:
    rows = [{"id": f"r{i:02d}", "text": f"Request {i} of a job.", "max_new_frames": frames} for i in range(n)]
    for i, row in enumerate(rows):
        if i % 2 == 0:
            row["seed"] = i
    return write_rows(tmp_path / "r.jsonl", rows)


def _synth(requests: Path, out: Path, url: str, *extra):
    return runner.invoke(app, ["synth", str(requests), "--out", str(out), "--server", url, *map(str, extra)])


def test_files_and_manifest_hold_what_the_server_sent_and_its_headers(tmp_path):
    requests = _requests(tmp_path, 3)
    with serving(Behaviour(moss_headers=True)) as url:
        result = _synth(requests, tmp_path / "out", url, "--concurrency", "3", "--format", "flac")
    assert result.exit_code == 0, result.output
    manifest = pd.read_csv(tmp_path / "out" / "manifest.csv", dtype={"id": str})
    assert list(manifest.columns) == COLUMNS and list(manifest["id"]) == ["r00", "r01", "r02"]  # input order
    row = manifest.set_index("id").loc["r01"]  # unseeded: the server's deploy seed, from its headers
    assert (row["seed"], row["seed_source"], row["frames"], row["sample_rate"]) == (42, "deploy", 3, RATE)
    data, rate = sf.read(tmp_path / "out" / "r01.flac", dtype="int16", always_2d=True)
    assert pcm_sha256(data) == row["pcm_sha256"] == pcm_sha256(synthesize("Request 1 of a job.", 42, 3))
    assert isinstance(row["codes_sha256"], str) and row["batch_size_seen"] >= 1


@pytest.mark.parametrize("suffix", ["/v1", "/v1/"])
def test_a_base_url_ending_in_v1_as_openai_clients_give_it_is_the_same_server(tmp_path, suffix):
    behaviour = Behaviour()
    with serving(behaviour) as url:
        result = _synth(_requests(tmp_path, 1), tmp_path / "out", url + suffix)
    assert result.exit_code == 0, result.output
    assert len(behaviour.seen) == 1 and (tmp_path / "out" / "r00.wav").is_file()


def test_without_moss_headers_the_server_only_cells_are_empty_and_unseeded_is_unknown(tmp_path):
    with serving(Behaviour()) as url:
        assert _synth(_requests(tmp_path, 2), tmp_path / "out", url).exit_code == 0
    manifest = pd.read_csv(tmp_path / "out" / "manifest.csv", dtype={"id": str}).set_index("id")
    assert list(manifest["seed_source"]) == ["request", "unknown"]
    assert manifest["codes_sha256"].isna().all() and manifest["frames"].isna().all()


def test_a_re_run_resumes_without_sending_and_another_server_model_regenerates(tmp_path):
    requests = _requests(tmp_path, 3)
    behaviour = Behaviour(moss_headers=True)
    with serving(behaviour) as url:
        assert _synth(requests, tmp_path / "out", url).exit_code == 0
        first = (tmp_path / "out" / "manifest.csv").read_text()
        again = _synth(requests, tmp_path / "out", url, "--json")
        assert again.exit_code == 0 and json.loads(again.output)["resumed"] == 3 and len(behaviour.seen) == 3
        other = _synth(requests, tmp_path / "out", url, "--served-model", "another")
    assert (tmp_path / "out" / "manifest.csv").read_text().split("\n")[0] == first.split("\n")[0]
    # A file made by another model is not silently kept or overwritten: it needs --force.
    assert other.exit_code == 2 and "--force" in " ".join(other.output.split())


def test_a_server_failure_mid_job_keeps_finished_files_and_a_partial_manifest(tmp_path):
    requests = _requests(tmp_path, 4)
    with serving(Behaviour(fail_from=3)) as url:
        result = _synth(requests, tmp_path / "out", url, "--concurrency", "1")
        assert result.exit_code == 2 and "request 'r03' (synth)" in result.output and "HTTP 500" in result.output
        # As an interrupt does, the error says that the finished files are kept and how to resume.
        assert "the 3 finished output(s) are kept in" in " ".join(result.output.split())
        assert "run the same command again to resume" in " ".join(result.output.split())
        manifest = pd.read_csv(tmp_path / "out" / "manifest.csv", dtype={"id": str})
        assert list(manifest["id"]) == ["r00", "r01", "r02"]
        assert sorted(p.name for p in (tmp_path / "out").glob("*.wav")) == ["r00.wav", "r01.wav", "r02.wav"]


# --- a killed client ---------------------------------------------------------------------------


def _cmd(requests: Path, out: Path, url: str) -> list[str]:
    return [sys.executable, "-m", "moss_cli", "synth", str(requests), "--out", str(out), "--server", url]


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}


def _wait_for_files(out: Path, count: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if out.is_dir() and len(list(out.glob("*.wav"))) >= count:
            return
        if proc.poll() is not None:
            pytest.fail(f"synth ended before {count} files existed: {proc.stderr.read()}")
        time.sleep(0.02)
    proc.kill()
    pytest.fail("timed out waiting for output files")


def _outputs(out: Path) -> tuple[dict, pd.DataFrame]:
    files = {p.name: p.read_bytes() for p in sorted(out.glob("*.wav"))}
    manifest = pd.read_csv(out / "manifest.csv", dtype={"id": str}).drop(columns=["wall_s", "batch_size_seen"])
    return files, manifest


@pytest.mark.slow
@pytest.mark.parametrize("sig, code", [(signal.SIGKILL, -9), (signal.SIGTERM, 143)])
def test_a_killed_client_resumes_to_the_same_files_and_manifest_with_no_leftovers(tmp_path, sig, code):
    requests = _requests(tmp_path, 12)
    with serving(Behaviour(moss_headers=True, hold_s=0.15)) as url:
        clean = subprocess.run(_cmd(requests, tmp_path / "clean", url), env=_env(), capture_output=True, timeout=120)
        assert clean.returncode == 0, clean.stderr
        out = tmp_path / "out"
        proc = subprocess.Popen(
            [*_cmd(requests, out, url), "--concurrency", "2"], env=_env(), stderr=subprocess.PIPE, text=True
        )
        _wait_for_files(out, 3, proc)
        proc.send_signal(sig)
        assert proc.wait(timeout=30) == code
        interrupted = len(list(out.glob("*.wav")))
        assert 3 <= interrupted < 12
        done = subprocess.run(_cmd(requests, out, url), env=_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert not [p for p in out.iterdir() if ".tmp-" in p.name]
    files, manifest = _outputs(out)
    expected_files, expected_manifest = _outputs(tmp_path / "clean")
    assert files == expected_files and manifest["id"].is_unique
    pd.testing.assert_frame_equal(manifest, expected_manifest)


def test_integer_columns_with_empty_cells_are_written_as_integers(tmp_path):
    # A server's run: one request gives top_k, the other does not, and the server sends no frame count.
    top_k = next(c for c in COLUMNS if c.endswith("top_k"))
    rows = [{"id": "a", top_k: 3, "frames": None, "seed": 7}, {"id": "b", top_k: None, "frames": None, "seed": None}]
    write_manifest(tmp_path / "manifest.csv", rows)
    lines = (tmp_path / "manifest.csv").read_text().splitlines()
    cells = dict(zip(lines[0].split(","), lines[1].split(",")))
    assert (cells[top_k], cells["seed"], cells["frames"]) == ("3", "7", "")
