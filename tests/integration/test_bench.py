"""`moss bench` runs on the tiny model and reports every figure it promises."""

import json
from pathlib import Path

import pytest
from cli_runs import assert_tables_whole, tables_at  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.bench import BenchRow
from moss_cli.cli.app import app

FIELDS = set(BenchRow.__dataclass_fields__)


def test_bench_on_random_tiny_weights_writes_every_figure(tmp_path):
    out = tmp_path / "bench.json"
    result = CliRunner().invoke(
        app,
        ["bench", "--random-weights", "tiny", "--batch", "1,2", "--frames", "4", "--repeats", "2", "--json", str(out)],
    )
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    rows = report["results"]
    assert {(r["mode"], r["batch"]) for r in rows} == {(m, b) for m in ("invariant", "blocks", "fast") for b in (1, 2)}
    layouts = {(r["mode"], r["batch"]): r["layout"] for r in rows}
    assert layouts[("blocks", 2)] == "blocks of 2" and layouts[("fast", 2)] == "unpadded"  # the fallback, forced
    assert layouts[("invariant", 2)] in ("blocks of 2", "one block", "one block padded to a multiple of 2")
    assert FIELDS == {
        "mode",
        "arm",
        "batch",
        "layout",
        "frames",
        "decode_step_ms",
        "decode_step_ms_range",
        "talker_frames_per_s",
        "prefill_tokens_per_s",
        "codec_rtf",
        "audio_s_per_s",
        "ttfa_s",
        "floor_step_ms",
        "efficiency",
        "efficiency_range",
        "kv_read_ms",
        "efficiency_bound",
        "step_read_mb",
        "kv_read_mb",
        "peak_memory_mb",
        "compile_s",
        "bandwidth_step_ms",
        "efficiency_bandwidth",
    }
    for row in rows:
        assert set(row) == FIELDS
        assert row["frames"] == 4 and row["talker_frames_per_s"] > 0 and row["decode_step_ms"] > 0
        assert row["floor_step_ms"] > 0 and 0 < row["efficiency"] and row["ttfa_s"] > 0 and row["codec_rtf"] > 0
        assert row["compile_s"] is None  # not compiled
        assert row["kv_read_ms"] > 0 and 0 < row["efficiency_bound"] < 1
        # the physical bound: the bytes a step reads (its weights, more than 1 MB, and its cache) at the copy rate
        assert 0 < row["kv_read_mb"] < row["step_read_mb"] and row["step_read_mb"] - row["kv_read_mb"] > 1
        bound_ms = row["step_read_mb"] / report["setup"]["bandwidth_gb_per_s"]
        assert row["bandwidth_step_ms"] == pytest.approx(bound_ms, rel=0.01)
        efficiency = row["bandwidth_step_ms"] / row["decode_step_ms"]
        assert row["efficiency_bandwidth"] == pytest.approx(efficiency, rel=0.01, abs=2e-4)
        assert 0 < row["prefill_tokens_per_s"] < 1e9  # a measured duration: no prompt of the tiny model prefills faster
        for key in ("decode_step_ms", "efficiency"):  # the median of two repeats lies within their range
            low, high = row[f"{key}_range"]
            assert low <= row[key] <= high
    assert set(report["over_fast"]) == set(report["over_fast_range"]) == {"invariant", "blocks"}
    for mode, ranges in report["over_fast_range"].items():
        assert set(ranges) == set(report["over_fast"][mode]) == {"1", "2"}
        for size, (low, high) in ranges.items():
            assert low <= report["over_fast"][mode][size] <= high
    assert "invariant / fast step time" in result.output and "blocks / fast step time" in result.output
    assert "(the modes alternate)" in result.output
    assert "so no engine could reach an efficiency above" in " ".join(result.output.split())
    assert "GB/s: the physical bound" in result.output and report["setup"]["bandwidth_gb_per_s"] > 0
    assert report["setup"]["model"] == "random tiny (173 k talker parameters)" and report["setup"]["threads"] == 1
    assert {r["arm"] for r in rows} == {"seeded"} and report["over_unseeded"] == {}  # the default arm alone


def test_bench_arms_on_the_local_engine_give_each_arms_cost_over_unseeded(tmp_path):
    out = tmp_path / "bench.json"
    deploy = Path(__file__).resolve().parents[2] / "recipes" / "moss_tts_local_tiny.yaml"
    args = ["bench", "--random-weights", "tiny", "--batch", "2", "--frames", "3", "--repeats", "2", "--modes", "fast"]
    args += ["--arms", "unseeded,seeded,deploy-seed", "--deploy", str(deploy), "--json", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    assert [(r["mode"], r["arm"]) for r in report["results"]] == [
        ("fast", "unseeded"),
        ("fast", "seeded"),
        ("fast", "deploy-seed"),
    ]
    assert report["setup"]["deploy_seed"] == 42 and report["setup"]["arms"] == ["unseeded", "seeded", "deploy-seed"]
    for arm in ("seeded", "deploy-seed"):
        ratio = report["over_unseeded"][arm]["fast"]["2"]
        low, high = report["over_unseeded_range"][arm]["fast"]["2"]
        assert 0 < low <= ratio <= high
    assert "fast seeded / unseeded step time" in result.output


def test_the_table_at_80_columns_keeps_every_figure_whole():
    from moss_cli.bench.local_report import COLUMNS

    args = ["bench", "--random-weights", "tiny", "--batch", "2", "--frames", "2", "--repeats", "1"]
    with tables_at(80) as drawn:
        result = CliRunner().invoke(app, [*args, "--modes", "invariant,fast", "--arms", "seeded,unseeded"])
    assert result.exit_code == 0, result.output
    assert len(drawn[0].cells) == 1 + 4 and drawn[0].cells[0] == [header for header, _ in COLUMNS]
    assert_tables_whole(drawn, 80)


def test_bench_rejects_bad_options_with_exit_2():
    runner = CliRunner()
    for args in (
        ["--batch", "0"],
        ["--batch", "x"],
        ["--random-weights", "huge"],
        ["--modes", "turbo"],
        ["--modes", "blocks:0"],
        ["--arms", "lucky"],
        ["--arms", "deploy-seed"],  # no --deploy: no seed to send
        ["--concurrency", "2"],  # a --server option
        ["--report-dir", "out"],
    ):
        result = runner.invoke(app, ["bench", "--frames", "2", "--repeats", "1", *args])
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output


def test_random_preset_codec_decodes_in_bfloat16():
    import torch

    from moss_cli.bench import BenchOptions
    from moss_cli.bench.models import load_models
    from moss_cli.numerics import INVARIANT

    model, codec_for, _, what = load_models(BenchOptions(random_weights="35m"), torch.device("cpu"), torch.bfloat16)
    codec = codec_for(INVARIANT)
    assert next(model.parameters()).dtype == torch.bfloat16 and what.startswith("random 35m")
    assert all(p.dtype == torch.float32 for p in codec.quantizer.parameters())  # as load_codec keeps it
    audio = codec.decode(torch.randint(0, 1024, (12, 1, 2)))
    assert audio.shape[0] == 1 and torch.isfinite(audio).all()


def test_the_floor_reads_the_weights_of_a_frame_in_the_order_the_frame_reads_them(talker32, monkeypatch):
    import torch

    from moss_cli.bench.floor import floor_weights
    from moss_cli.engine.frame import FrameSampler, frame_and_logits
    from moss_cli.engine.sampling import RowParams
    from moss_cli.numerics import kernels
    from moss_cli.sampling_params import AUDIO_DEFAULTS, STOP_HEAD_DEFAULTS

    model = talker32.model
    if not model.packed:  # every product then goes through kernels.linear (heads too)
        pytest.skip("needs oneDNN packing (a CPU with float32 oneDNN)")
    read = []
    plain = kernels.linear
    monkeypatch.setattr(kernels, "linear", lambda x, w, b=None: read.append(w) or plain(x, w, b))
    rows, cpu = 3, torch.device("cpu")
    draws = FrameSampler(
        torch.rand(rows, 1 + model.cfg.n_vq),
        RowParams.of([STOP_HEAD_DEFAULTS] * rows, [False] * rows, cpu),
        RowParams.of([AUDIO_DEFAULTS] * rows, [False] * rows, cpu),
    )
    with torch.inference_mode():
        frame_and_logits(model, torch.randn(rows, model.cfg.hidden_size), draws)
    backbone = sum(isinstance(m, torch.nn.Linear) for m in model.transformer.modules())
    expected = floor_weights(model)[backbone:]
    assert len(read) == len(expected) and all(a is b for a, b in zip(read, expected))


def test_the_prefill_figure_is_a_duration_read_around_the_prefill_alone(monkeypatch):
    """The clock is read right before and right after the engine's prefill of the batch, nothing else between:
    never a time derived by subtracting other readings, which can come out negative."""
    import torch

    from moss_cli.bench import BenchOptions, run
    from moss_cli.bench.models import load_models
    from moss_cli.numerics import INVARIANT
    from moss_cli.numerics.layout import EngineLayout

    model, _, prompts, _ = load_models(BenchOptions(), torch.device("cpu"), torch.float32)
    calls, readings = [], iter([7.0, 7.25])
    engine_prefill = run.prefill
    monkeypatch.setattr(run, "prefill", lambda *args: calls.append("prefill") or engine_prefill(*args))
    requests = run._requests(prompts, 2, 3)

    def clock():
        calls.append("clock")
        return next(readings)

    seconds = run._prefill_seconds(model, EngineLayout.fix(model, INVARIANT, 2), requests, clock)
    assert calls == ["clock", "prefill", "clock"] and seconds == 0.25
    talker = run._talker_run(model, EngineLayout.fix(model, INVARIANT, 2), prompts, 2, 3)
    assert talker.prefill_s > 0 and calls.count("prefill") == 2  # the bench's runs take that measurement


def test_random_tiny_weights_have_the_shipped_shapes_but_not_its_values():
    import torch

    from moss_cli.bench import BenchOptions
    from moss_cli.bench.models import load_models

    cpu = torch.device("cpu")
    random, _, _, what = load_models(BenchOptions(random_weights="tiny"), cpu, torch.float32)
    shipped, _, _, shipped_what = load_models(BenchOptions(), cpu, torch.float32)
    assert what.startswith("random tiny") and shipped_what == "tiny (shipped)"
    ours, theirs = random.state_dict(), shipped.state_dict()
    assert ours.keys() == theirs.keys()
    plain = [k for k, v in theirs.items() if not v.is_mkldnn and v.numel() > 1]  # packed weights cannot be compared
    assert plain and all(ours[k].shape == theirs[k].shape and not torch.equal(ours[k], theirs[k]) for k in plain)
