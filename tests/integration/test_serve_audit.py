"""The server audit and `synth --server` against a real `moss serve` process (tiny model): it passes
bitwise with requests that really ran together; the legacy global RNG is batch-dependent; a deploy
without a seed is not reproducible (unseeded with --allow-unseeded); synthesis through the server
equals local synthesis bitwise and survives a killed client."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pytest
from cli_runs import flat, moss, moss_audit, write_rows  # tests/ is on sys.path
from serve_helpers import serve_load

pytestmark = pytest.mark.slow  # real server processes
ROOT = Path(__file__).resolve().parents[2]
load = serve_load()
RECORDS = [
    {"id": "seeded-a", "text": "A request with its own seed.", "seed": 11, "max_new_frames": 16},
    {"id": "seeded-zero", "text": "Seed zero is a seed too.", "seed": 0, "max_new_frames": 12},
    {"id": "unseeded-a", "text": "No seed: the deploy seed decides.", "max_new_frames": 20},
    {"id": "unseeded-b", "text": "A longer unseeded request, still running when others finish.", "max_new_frames": 28},
]
JOB = [
    {"id": f"job-{i:02d}", "text": f"Line {i} of a batch job.", "max_new_frames": 40, **({"seed": i} if i % 2 else {})}
    for i in range(16)
]


@contextmanager
def moss_serve(folder: Path, *options: str):
    """`moss serve` in its own process on a free port; yields its URL; stopped with SIGTERM."""
    port = load.free_port()
    process = load.start_server(port, folder / f"serve-{port}.log", *options)
    url = f"http://127.0.0.1:{port}"
    try:
        load.wait_healthy(url, process)
        yield url
    finally:
        code, _ = load.stop_server(process)
        assert code == 0, (folder / f"serve-{port}.log").read_text()


@pytest.fixture(scope="module")
def seeded_server(tmp_path_factory):
    with moss_serve(tmp_path_factory.mktemp("serve")) as url:
        yield url


def test_moss_serve_passes_bitwise_with_requests_that_really_ran_together(seeded_server, tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", RECORDS)
    code, report, output = moss_audit(requests, "--level", "bitwise", server=seeded_server, report=tmp_path / "a.json")
    assert code == 0, output
    assert {v["verdict"] for v in report["server"]["requests"].values()} == {"identical"}
    assert report["server"]["stagger"].startswith("auto")  # spaced by the measured time alone: they overlap
    runs = report["server"]["runs"]
    for scenario in ("concurrent", "shuffled", "seeded-neighbours", "length-mix", "voices", "staggered"):
        [run] = [run for label, run in runs.items() if label.startswith(f"{scenario}/")]
        assert run["max_in_flight_server"] > 1, scenario  # the engine's batch held several of them
    assert runs["reference/alone"]["max_in_flight_server"] == 1
    assert report["server"]["codes"] == "x-moss-codes-sha256 header"
    assert report["summary"]["failures"] == 0 and report["summary"]["cases"] > 0


def test_the_built_in_audit_of_moss_serve_gives_the_figures_its_documentation_gives(seeded_server, tmp_path):
    """docs/server-audit.md's example: the built-in set against moss serve passes bitwise with 8 in
    flight at once, in as many comparisons as its formula (requests x scenarios) says."""
    doc = " ".join((ROOT / "docs" / "server-audit.md").read_text().split())
    found = re.search(
        r"each of its (\d+) requests is compared with its reference once in each of the (\d+) scenarios.*?"
        r"each of the (\d+) requests a batch item can carry alone first, and the `websocket` scenario each of the "
        r"(\d+) requests an utterance can carry twice more"
        r".*?so (\d+) x (\d+) \+ (\d+) \+ 2 x (\d+) = (\d+) comparisons",
        doc,
    )
    assert found, "the figures of the moss serve example are gone from docs/server-audit.md"
    requests, scenarios, items, utterances, *product = map(int, found.groups())
    cases = requests * scenarios + items + 2 * utterances
    assert product == [requests, scenarios, items, utterances, cases]
    assert "--level bitwise # passes; 8 in flight at once" in doc
    code, report, output = moss_audit("--level", "bitwise", server=seeded_server, report=tmp_path / "a.json")
    assert code == 0, output
    assert report["summary"]["requests"] == requests and len(report["summary"]["scenarios"]) == scenarios
    assert report["summary"]["cases"] == cases and not report["server"]["skipped"]
    assert len(report["server"]["batch_items"]["items"]) == items
    assert len(report["server"]["websocket"]["utterances"]) == utterances
    assert report["server"]["runs"]["concurrent/concurrent-8"]["max_in_flight_client"] == 8


def test_a_baseline_of_the_local_audit_is_met_bitwise_by_moss_serve(seeded_server, tmp_path):
    """The same model, deploy and numerics behind a server give the local engine's codes and PCM,
    so a baseline saved on a laptop can gate a deployment."""
    requests = write_rows(tmp_path / "r.jsonl", RECORDS)
    golden = tmp_path / "local-golden.json"
    local = moss_audit(requests, "--scenarios", "batched", "--save-golden", golden)
    assert local.exit_code == 0, local.output
    gated = (requests, "--scenarios", "concurrent", "--golden", golden)
    code, report, output = moss_audit(*gated, server=seeded_server, stagger_ms=30, report=tmp_path / "a.json")
    assert code == 0 and report["golden"]["passed"], output
    assert report["golden"]["environment_changes"] == {}  # moss serve reports its engine: the same one
    assert (
        report["environment"]["talker_checkpoint"] == json.loads(golden.read_text())["environment"]["talker_checkpoint"]
    )
    # The same model served in another dtype: every batch agrees with itself, the baseline does not,
    # and the server's own account of its engine names the cause.
    with moss_serve(tmp_path, "--dtype", "float64") as url:
        code, report, output = moss_audit(*gated, server=url, stagger_ms=30, report=tmp_path / "b.json")
    assert code == 1 and report["summary"]["failures"] == 0, output
    assert "dtype float32 -> float64" in report["golden"]["causes"]


def test_synth_through_moss_serve_equals_local_synth_bitwise(seeded_server, tmp_path):
    requests = write_rows(tmp_path / "job.jsonl", JOB)
    local = moss("synth", requests, "--out", tmp_path / "local")
    served = moss("synth", requests, "--out", tmp_path / "served", "--server", seeded_server, "--concurrency", 4)
    assert local.exit_code == 0 and served.exit_code == 0, local.output + served.output
    same = [
        "id",
        "seed",
        "seed_source",
        "frames",
        "duration_s",
        "sample_rate",
        "channels",
        "codes_sha256",
        "pcm_sha256",
        "stop_reason",
        "file",
    ]
    a = pd.read_csv(tmp_path / "local" / "manifest.csv", dtype={"id": str})[same]
    b = pd.read_csv(tmp_path / "served" / "manifest.csv", dtype={"id": str})[same]
    pd.testing.assert_frame_equal(a, b)
    for row in a.itertuples():
        assert (tmp_path / "local" / row.file).read_bytes() == (tmp_path / "served" / row.file).read_bytes()
    # Raw PCM (stereo here) decodes by the server's rate and channel headers to the same samples.
    pcm = moss("synth", requests, "--out", tmp_path / "pcm", "--server", seeded_server, "--response-format", "pcm")
    assert pcm.exit_code == 0, pcm.output
    c = pd.read_csv(tmp_path / "pcm" / "manifest.csv", dtype={"id": str})[same]
    pd.testing.assert_frame_equal(a, c)


def test_synth_through_moss_serve_resumes_after_the_client_is_killed(seeded_server, tmp_path):
    requests = write_rows(tmp_path / "job.jsonl", JOB)
    out = tmp_path / "out"
    command = [sys.executable, "-m", "moss_cli", "synth", str(requests), "--out", str(out), "--server", seeded_server]
    env = {**load.os.environ, "PYTHONPATH": str(ROOT), "CI": "1"}
    process = subprocess.Popen([*command, "--concurrency", "2"], env=env, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while len(list(out.glob("*.wav"))) < 2:
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "no output files in time"
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    assert len(list(out.glob("*.wav"))) < len(JOB)  # killed mid-run
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    manifest = pd.read_csv(out / "manifest.csv", dtype={"id": str})
    assert list(manifest["id"]) == [r["id"] for r in JOB]
    assert sorted(p.name for p in out.iterdir() if p.is_file()) == sorted(f"{r['id']}.wav" for r in JOB) + [
        "manifest.csv"
    ]
    clean = moss("synth", requests, "--out", tmp_path / "clean", "--server", seeded_server)
    assert clean.exit_code == 0
    expected = pd.read_csv(tmp_path / "clean" / "manifest.csv", dtype={"id": str})
    assert list(manifest["pcm_sha256"]) == list(expected["pcm_sha256"])


def test_legacy_global_rng_is_one_cause_rng_coupling_in_every_report(tmp_path):
    """docs/audit.md and docs/server-audit.md: this server "fails: rng-coupling". One cause, decided once: the
    headline, each request's verdict and detail, the path table and every format name it; the seed probes
    name the probe and the seeds sent; the counts say which requests carry a seed."""
    with moss_serve(tmp_path, "--legacy-global-rng") as url:
        code, report, output = moss_audit(
            write_rows(tmp_path / "r.jsonl", RECORDS),
            "--level",
            "bitwise",
            "--scenarios",
            "concurrent,seeded-neighbours,seeds",
            f"--junit={tmp_path / 'a.xml'}",
            f"--markdown={tmp_path / 'a.md'}",
            server=url,
            stagger_ms=30,
            report=tmp_path / "a.json",
        )
    assert code == 1, output
    assert set(report["summary"]["causes"]) == {"rng-coupling"}
    seed = report["questions"]["seed"]
    assert seed["verdict"] == "rng-coupling" and seed["unseeded"] == 2 and seed["requests"] == 4
    assert set(seed["failed"].values()) == {"rng-coupling"}
    assert report["questions"]["numerics"]["verdict"] == "not checked"  # no request is reproducible there
    assert all(case["verdict"] == "pass" for case in report["cases"] if case["scenario"] == "repeat")
    assert {v["verdict"] for v in report["verdicts"].values()} == {"rng-coupling"}
    assert report["server"]["paths"]["single"]["verdict"] == "rng-coupling"
    probes = {c["request"]: c["attribution"]["detail"] for c in report["cases"] if c["scenario"] == "seeds"}
    assert probes["seeded-zero"].startswith(
        "sent alone with seed 1 (seeds/another-explicit-seed), it gives the audio it gives alone with its seed 0: "
        "the server reports that every request draws from one global random stream"
    )
    assert probes["unseeded-a"].startswith(
        "sent alone with seed 1000003 (seeds/unseeded-sent-with-seed-1000003), it gives the audio it gives alone "
        "with no seed"
    )
    said = flat(output)
    assert "Seed: FAIL rng-coupling" in said and "seed-ignored" not in said and "batch-dependent" not in said
    markdown = (tmp_path / "a.md").read_text()
    assert "FAIL rng-coupling" in markdown and "seed-ignored" not in markdown
    junit = (tmp_path / "a.xml").read_text()
    assert 'type="rng-coupling"' in junit and 'type="seed-ignored"' not in junit


def test_a_deploy_without_a_seed_is_not_reproducible_and_unseeded_only_when_allowed(tmp_path):
    deploy = ROOT / "recipes" / "moss_tts_local_tiny_unseeded.yaml"
    requests = write_rows(tmp_path / "r.jsonl", RECORDS)
    scenarios = ("--scenarios", "repeat,concurrent")
    with moss_serve(tmp_path, "--deploy", str(deploy)) as url:
        code, report, output = moss_audit(requests, *scenarios, server=url, stagger_ms=30, report=tmp_path / "a.json")
        allowed, allowed_report, allowed_output = moss_audit(
            requests, *scenarios, "--allow-unseeded", server=url, stagger_ms=30, report=tmp_path / "s.json"
        )
    assert code == 1, output
    verdicts = {key: v["verdict"] for key, v in report["server"]["requests"].items()}
    assert verdicts == {
        "seeded-a": "identical",
        "seeded-zero": "identical",
        "unseeded-a": "unseeded-not-reproducible",
        "unseeded-b": "unseeded-not-reproducible",
    }
    assert report["reference"]["unseeded-a"]["seed_source"] == "none"
    assert "the server reports that no seed reached it" in report["server"]["requests"]["unseeded-a"]["detail"]
    assert allowed == 0, allowed_output
    assert {key: v["verdict"] for key, v in allowed_report["server"]["requests"].items()} == {
        **verdicts,
        "unseeded-a": "unseeded",
        "unseeded-b": "unseeded",
    }
