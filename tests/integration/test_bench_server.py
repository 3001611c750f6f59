"""`moss bench --server` against `moss serve` (the tiny model, in this process) and the vllm-omni 0.30.0
test double: the figures are there and sane, every response is checked against its request alone, the
double's process-wide RNG (before the deploy-seed fix) is caught and named, the fixed one passes, and
bad options are exit 2. Every server binds 127.0.0.1; each run is a few dozen short requests."""

import json
from pathlib import Path

import pytest
from cli_runs import assert_tables_whole, tables_at, write_rows
from serve_helpers import running  # tests/ is on sys.path
from typer.testing import CliRunner
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni

from moss_cli.cli.app import app
from moss_cli.pipeline import SynthOptions

runner = CliRunner()
DEPLOY = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_v1.5.yaml"  # seed 42, as the double's
UNSEEDED_BUILT_IN = {"short-unseeded", "long-unseeded", "twin-a", "twin-b", "instructed"}
SHORT = ["--frames", "6", "--num-requests", "8", "--repeats", "1", "--warmup", "1"]  # 8 built-in requests, 6 frames


def _bench(url: str, tmp_path: Path, *args) -> tuple[int, dict, str]:
    out = tmp_path / "bench.json"
    out.unlink(missing_ok=True)
    result = runner.invoke(app, ["bench", "--server", url, "--json", str(out), *SHORT, *map(str, args)])
    assert "Traceback" not in result.output, result.output
    return result.exit_code, json.loads(out.read_text()) if out.exists() else {}, " ".join(result.output.split())


def _rows(report: dict) -> dict[tuple[str, int], dict]:
    return {(r["arm"], r["max_concurrency"]): r for r in report["results"]}


def _request_file(tmp_path: Path) -> Path:
    rows = [
        {"id": "plain", "text": "A short one."},
        {"id": "own-seed", "text": "Another, with its own seed.", "seed": 5},
        {"id": "third", "text": "And a third, a little longer than the others."},
    ]
    return write_rows(tmp_path / "requests.jsonl", rows)


@pytest.mark.slow  # moss serve starts its engine (about 10 s here)
def test_against_moss_serve_every_response_holds_and_the_figures_are_sane(tmp_path):
    folder = tmp_path / "report"
    args = ["--concurrency", "1,4", "--requests", _request_file(tmp_path), "--report-dir", folder]
    with running(SynthOptions(device="cpu", max_batch=4)) as (url, _):
        code, report, output = _bench(url, tmp_path, *args)
    assert code == 0, output
    assert "PASS: 32 responses under load; every unseeded, seeded one gave its request's audio alone" in output
    assert report["setup"]["requests"] == ["plain", "own-seed", "third"]
    # moss serve says it applied the deploy seed to unseeded requests: they must hold too.
    assert report["setup"]["unseeded_must_hold"] and report["setup"]["reference_voice"].startswith("not required")
    rows = _rows(report)
    assert set(rows) == {(arm, c) for arm in ("unseeded", "seeded") for c in (1, 4)}
    for (arm, c), row in rows.items():
        assert row["completed"] == 8 and row["failed"] == 0 and row["checks"]["identical"] == 8, row
        assert row["request_throughput"] > 0 and row["audio_throughput"] > 0 and row["duration"] > 0
        assert 0 < row["median_audio_ttfp_ms"] <= row["max_concurrent_requests"] * row["median_e2el_ms"]
        assert 0 < row["p50_audio_ttfp_ms"] <= row["p90_audio_ttfp_ms"] <= row["p99_audio_ttfp_ms"]
        assert 0 < row["p50_e2el_ms"] <= row["p90_e2el_ms"] <= row["p99_e2el_ms"]
        assert row["total_audio_duration_s"] == pytest.approx(8 * row["mean_audio_duration_s"], rel=1e-3)
        assert row["total_audio_frames"] == pytest.approx(48_000 * row["total_audio_duration_s"], rel=1e-3)
        assert row["mean_audio_rtf"] > 0 and 0 <= row["audio_continuity_ok_rate"] <= 1
        assert 1 <= row["max_concurrent_requests"] <= c and len(row["rounds"]) == 1
    assert rows[("seeded", 4)]["max_concurrent_requests"] > 1  # requests really were in flight together
    cost = report["over_unseeded"]["seeded"]
    assert set(cost) == {"1", "4"} and all(v[1] <= v[0] <= v[2] for v in cost["4"].values())
    responses = report["responses"]
    assert len(responses) == 32 and {r["check"] for r in responses} == {"identical"}
    page = (folder / "index.html").read_text()
    assert "The cost of determinism" in page and 'src="plots/against-concurrency.png"' in page
    assert (folder / "plots" / "against-concurrency.png").stat().st_size > 0
    assert json.loads((folder / "bench.json").read_text())["summary"]["passed"] is True


def test_the_released_double_fails_naming_the_unseeded_requests_that_varied_under_load(tmp_path):
    folder = tmp_path / "report"
    args = ["--concurrency", "2", "--num-requests", "4", "--deploy", DEPLOY, "--report-dir", folder]
    with serving_vllm_omni(FakeMossLocalEngine(fixed=False)) as url:
        code, report, output = _bench(url, tmp_path, *args)
    assert code == 1, output
    assert f"report: {folder / 'index.html'}" in output  # where the page is, as the audit says it
    assert report["setup"]["deploy_seed"] == 42 and report["setup"]["reference_voice"].startswith("required")
    varied = [r for r in report["responses"] if r["check"] != "identical"]
    # Every unseeded response draws from the one process-wide RNG; every seeded one holds.
    assert {(r["arm"], r["check"]) for r in varied} == {("unseeded", "varied")} and len(varied) == 4
    assert {r["check"] for r in report["responses"] if r["arm"] == "seeded"} == {"identical"}
    assert "short-unseeded#0 differs from the same request alone at concurrency 2, arm unseeded, round 1" in output
    assert "in flight with it: long-unseeded#1" in output and "FAIL: 4 of 8 responses" in output
    assert all("arm unseeded" in line for line in report["summary"]["varied"])
    page = (folder / "index.html").read_text()
    assert "Diverging pairs (4)" in page and (folder / "diverging" / "4-under-load.wav").is_file()


def test_without_the_deploy_seed_unseeded_variation_fails_and_names_its_causes_unless_allowed(tmp_path):
    """An unseeded response that differs from its request alone is not reproducible: without
    --deploy the bench cannot say why, so it names both causes and how to tell them apart."""
    args = ("--concurrency", "2", "--no-stream", "--response-format", "wav")
    with serving_vllm_omni(FakeMossLocalEngine(fixed=False)) as url:
        with tables_at(80) as drawn:
            code, report, output = _bench(url, tmp_path, *args)
        allowed, accepted, accepted_output = _bench(url, tmp_path, *args, "--allow-unseeded")
    assert_tables_whole(drawn, 80)  # a table of 16 figures and costs, at 80 columns
    assert code == 1, output
    assert report["setup"]["unseeded_must_hold"] and not report["setup"]["allow_unseeded"]
    assert {r["check"] for r in report["responses"] if r["arm"] == "unseeded"} == {"varied"}
    why = report["summary"]["unseeded_causes"]
    assert why.startswith("8 unseeded response(s) differ from their request alone: not reproducible")
    assert "the server's deploy config gives stage 0 no seed, or it gives one and the deploy seed" in why
    assert "--deploy FILE (the deploy file the server runs) tells the two apart" in why
    assert "or a retry with a random seed" not in why  # the built-in requests have frame budgets
    assert why in output and "FAIL: 8 of 16 responses" in output
    # Accepted: reported, not a failure.
    assert allowed == 0, accepted_output
    assert not accepted["setup"]["unseeded_must_hold"] and accepted["summary"]["unseeded_causes"] is None
    assert {r["check"] for r in accepted["responses"] if r["arm"] == "unseeded"} == {"varied-unseeded"}
    assert "reported, --allow-unseeded" in accepted_output and "PASS" in accepted_output
    assert all("median_audio_ttfp_ms" not in r for r in accepted["results"])  # whole bodies: no first packet


def test_the_fixed_double_passes_with_the_deploy_seed_arm_for_a_duration_of_poisson_arrivals(tmp_path):
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True)) as url:
        args = ["--concurrency", "2", "--arms", "unseeded,deploy-seed", "--deploy", DEPLOY]
        out = tmp_path / "bench.json"
        result = runner.invoke(
            app,
            ["bench", "--server", url, "--json", str(out), "--frames", "4", "--repeats", "2", "--warmup", "0"]
            + args
            + ["--duration", "0.4", "--request-rate", "20"],
        )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert report["setup"]["arrivals"] == "Poisson, 20 requests/s" and report["setup"]["num_requests"] == {"2": None}
    for row in report["results"]:
        assert row["completed"] >= 2 and row["failed"] == 0 and row["checks"]["identical"] == row["completed"]
        assert len(row["rounds"]) == 2
    assert set(report["over_unseeded"]["deploy-seed"]["2"]) >= {"median_e2el_ms", "audio_throughput"}


def test_bad_options_are_exit_2_before_anything_is_sent(tmp_path):
    url = "http://127.0.0.1:9"  # nothing listens there: every one of these must fail first
    for args in (
        ["--concurrency", "0"],
        ["--concurrency", "1,x"],
        ["--arms", "lucky"],
        ["--arms", "deploy-seed"],
        ["--level", "codes"],
        ["--num-requests", "2", "--duration", "1"],
        ["--duration", "0"],
        ["--request-rate", "0"],
        ["--response-format", "flac"],  # streamed: wav or pcm
        ["--batch", "2"],  # the local engine's
        ["--random-weights", "tiny"],
        ["--device", "cpu"],
        ["--deploy", tmp_path / "missing.yaml"],
    ):
        result = runner.invoke(app, ["bench", "--server", url, *map(str, args)])
        assert result.exit_code == 2, (args, result.output)
        assert result.output.startswith("error:") and "Traceback" not in result.output, (args, result.output)
    result = runner.invoke(app, ["bench", "--server", url, "--frames", "2", "--num-requests", "1"])
    assert result.exit_code == 2 and "cannot connect" in result.output, result.output
