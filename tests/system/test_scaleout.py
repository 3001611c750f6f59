"""`moss synth --ray` and `moss audit-determinism --ray` on a local Ray: every request's codes and
PCM are those of the single-process run whatever the worker count, the split and the finishing
order; a worker killed mid-run has its requests redone by another; an interrupted run resumes;
without Ray installed `--ray` exits 2 with the install command."""

from __future__ import annotations

import csv
import json
import logging
import os
import signal
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.io.atomic import TEMPORARY_GLOB
from moss_cli.pipeline import SynthOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "requests.jsonl"
TIMING = ("wall_s", "batch_size_seen")  # how a request ran, not what it produced
INSTALL = "pip install 'moss-tts-repro[ray]'"
cli = CliRunner()


def _running_descendants(root: int) -> list[str]:
    """Processes below `root` that are still alive (zombies excluded), from /proc."""
    parent, names = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        state, ppid = text[text.rindex(")") + 2 :].split()[:2]
        if state != "Z":
            pid = int(stat.parent.name)
            parent[pid], names[pid] = int(ppid), text[text.index("(") + 1 : text.rindex(")")]
    found, frontier = [], [root]
    while frontier:
        below = [pid for pid, up in parent.items() if up in frontier]
        found += below
        frontier = below
    return [f"{pid} {names[pid]}" for pid in found]


@pytest.fixture(scope="module")
def local_ray():
    """One local Ray for the module (its start costs seconds); nothing of it may outlive the module."""
    ray = pytest.importorskip("ray")
    before = set(_running_descendants(os.getpid()))
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    yield ray
    ray.shutdown()
    assert set(_running_descendants(os.getpid())) <= before


@pytest.fixture(autouse=True)
def default_threads(monkeypatch):
    """Plain `moss synth` picks its torch threads from the model size unless OMP_NUM_THREADS says
    otherwise; the workers must pick the same, so no thread variable leaks in from the shell."""
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Plain `moss synth` of the example requests, in this process."""
    out = tmp_path_factory.mktemp("single-process")
    result = cli.invoke(app, ["synth", str(EXAMPLES), "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


def _manifest(out: Path) -> list[dict]:
    with (out / "manifest.csv").open(newline="", encoding="utf-8") as handle:
        return [{k: v for k, v in row.items() if k not in TIMING} for row in csv.DictReader(handle)]


def _assert_same_outputs(out: Path, reference: Path) -> None:
    """The same manifest (timing columns aside, input order), the same audio bytes, nothing else."""
    assert _manifest(out) == _manifest(reference)
    audio = sorted(p.name for p in reference.glob("*.wav"))
    assert sorted(p.name for p in out.glob("*.wav")) == audio
    for name in audio:
        assert (out / name).read_bytes() == (reference / name).read_bytes(), name
    assert not list(out.glob(TEMPORARY_GLOB))


def _on_ray(cluster, out: Path, seen: list, **job):
    from moss_cli.jobs.ray import synthesize_on_ray

    return synthesize_on_ray(
        cluster, EXAMPLES, out, SynthOptions(**job.pop("options", {})), source_seen=seen.append, **job
    )


@pytest.mark.slow
def test_two_workers_give_every_request_the_bits_of_plain_moss_synth(local_ray, reference, tmp_path):
    result = cli.invoke(app, ["synth", str(EXAMPLES), "--ray", "--workers", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    _assert_same_outputs(tmp_path, reference)


@pytest.mark.slow
def test_one_and_three_workers_splitting_the_requests_otherwise_give_the_same_bits(local_ray, reference, tmp_path):
    from moss_cli.scaleout.cluster import ClusterOptions

    seen: list = []
    _on_ray(ClusterOptions(workers=1), tmp_path / "one", seen)
    _on_ray(ClusterOptions(workers=3), tmp_path / "three", seen, options={"max_batch": 2})
    _assert_same_outputs(tmp_path / "one", reference)
    _assert_same_outputs(tmp_path / "three", reference)
    one, three = (runner.placement for runner in seen)
    assert set(one.values()) == {0}
    assert set(three.values()) == {0, 1, 2}  # every worker delivered part of the requests


@pytest.mark.slow
def test_a_worker_killed_mid_run_has_its_unfinished_requests_redone_by_another(local_ray, reference, tmp_path):
    from moss_cli.scaleout.cluster import ClusterOptions

    seen, events, killed = [], [], []

    def kill_worker_0(result):
        if not killed:  # after the first result: worker 0 still holds requests it has not finished
            killed.append(seen[0].session.pids[0])
            os.kill(killed[0], signal.SIGKILL)

    # One request at a time per worker, two in flight: a killed worker always has one waiting.
    summary = _on_ray(
        ClusterOptions(workers=2),
        tmp_path,
        seen,
        options={"max_batch": 1},
        on_result=kill_worker_0,
        on_event=events.append,
    )
    assert killed and summary.requests == 8
    assert seen[0].dispatcher.resent >= 1
    assert any("worker 0 died" in event for event in events)
    _assert_same_outputs(tmp_path, reference)


@pytest.mark.slow
def test_a_ray_run_interrupted_after_three_requests_resumes_where_it_stopped(local_ray, reference, tmp_path):
    from moss_cli.scaleout.cluster import ClusterOptions

    def stop_after_three(result, done=[]):
        done.append(result.request.id)
        if len(done) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        _on_ray(ClusterOptions(workers=2), tmp_path, [], on_result=stop_after_three)
    assert len(_manifest(tmp_path)) == 3  # the partial manifest of what finished
    summary = _on_ray(ClusterOptions(workers=2), tmp_path, [])
    assert summary.resumed == 3
    _assert_same_outputs(tmp_path, reference)


@pytest.mark.slow
def test_the_audit_on_workers_passes_its_sharded_and_voice_runs_and_catches_the_legacy_global_rng(local_ray, tmp_path):
    report = tmp_path / "audit.json"
    base = ["audit-determinism", "--ray", "--workers", "2", "--scenarios", "sharded,voices", "--json", str(report)]
    result = cli.invoke(app, base)
    assert result.exit_code == 0, result.output
    cases = json.loads(report.read_text())["cases"]
    sharded = [c for c in cases if c["scenario"] == "sharded"]
    assert {c["run"] for c in sharded} == {"2-shards-alternating", "3-shards-contiguous-reversed"}
    assert all(c["comparison"]["pcm_equal"] for c in cases)

    # The negative control still fails there, and the divergence is replayed on a worker to explain it.
    result = cli.invoke(app, [*base, "--legacy-global-rng"])
    assert result.exit_code == 1, result.output
    causes = {
        (c["attribution"] or {}).get("cause") for c in json.loads(report.read_text())["cases"] if c["verdict"] == "fail"
    }
    assert causes == {"rng-coupling"}


@pytest.mark.slow
def test_gpu_workers_on_a_cluster_without_gpus_exit_2_before_any_worker_starts(local_ray, tmp_path):
    result = cli.invoke(app, ["synth", str(EXAMPLES), "--ray", "--gpus-per-worker", "1", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "GPU (it has 0)" in result.output
    assert not (tmp_path / "o").exists()


def test_without_ray_installed_ray_exits_2_with_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if it were not installed
    for command in (["synth", str(EXAMPLES), "--out", str(tmp_path / "o")], ["audit-determinism"]):
        result = cli.invoke(app, [*command, "--ray", "--workers", "2"])
        assert result.exit_code == 2, result.output
        assert INSTALL in " ".join(result.output.split())
    assert not (tmp_path / "o").exists()


def test_ray_options_without_ray_are_refused(tmp_path):
    result = cli.invoke(app, ["synth", str(EXAMPLES), "--workers", "2", "--out", str(tmp_path)])
    assert result.exit_code == 2
    assert "--workers only apply with --ray" in result.output


def test_stream_does_not_combine_with_ray(tmp_path):
    result = cli.invoke(app, ["synth", str(EXAMPLES), "--ray", "--stream", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "--stream" in result.output and not (tmp_path / "o").exists()


def test_the_sharded_scenario_splits_the_requests_two_ways_each_request_once(tmp_path):
    from moss_cli.audit.scenarios import Target, build_runs
    from moss_cli.config.builtin import builtin_requests

    audited = builtin_requests()
    runs = build_runs("sharded", audited, Target(server=False), tmp_path)
    ids = [r.id for r in audited]
    splits = []
    for run in runs:
        pieces = [[m.key for m in shard] for shard in run.pieces()]
        assert sorted(i for piece in pieces for i in piece) == sorted(ids)
        splits.append(sorted(map(sorted, pieces)))
    assert [len(run.pieces()) for run in runs] == [2, 3] and splits[0] != splits[1]


def test_bad_requests_are_refused_on_the_driver_as_locally_before_any_worker_starts(monkeypatch, tmp_path):
    pytest.importorskip("ray")
    from moss_cli.scaleout.cluster import Session

    def no_workers(*args, **kwargs):
        raise AssertionError("a worker started")

    monkeypatch.setattr(Session, "start", no_workers)
    bad = tmp_path / "bad.jsonl"
    lines = ['{"id": "a", "text": "fine"}', '{"id": "b", "text": ""}', '{"id": "c", "text": "x", "max_new_frames": 0}']
    bad.write_text("\n".join(lines) + "\n")
    local = cli.invoke(app, ["synth", str(bad), "--out", str(tmp_path / "local")])
    on_ray = cli.invoke(app, ["synth", str(bad), "--ray", "--workers", "2", "--out", str(tmp_path / "ray")])
    assert local.exit_code == on_ray.exit_code == 2
    assert on_ray.output == local.output and ":2 [text]" in on_ray.output and ":3 [max_new_frames]" in on_ray.output
    assert not (tmp_path / "ray").exists()
