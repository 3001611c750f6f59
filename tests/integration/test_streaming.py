"""Streaming codec decode: chunk schedules from the deploy, bitwise equal to offline decode."""

from pathlib import Path

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

import moss_cli
from moss_cli.assets import TINY_CODEC
from moss_cli.cli.app import app
from moss_cli.numerics import INVARIANT
from moss_cli.pipeline.streaming import StreamingDecode, chunk_schedule

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    "keys, expected",
    [
        ({"initial_codec_chunk_frames": 1, "codec_chunk_frames": 15}, [1, 15]),
        ({"codec_chunk_ramp": [4, 4, 8, 15], "codec_chunk_frames": 15}, [4, 4, 8, 15, 15]),
        (
            {"codec_chunk_ramp": "4,4,8,15", "codec_chunk_frames": 15, "initial_codec_chunk_frames": 1},
            [4, 4, 8, 15, 15],
        ),
        ({"codec_chunk_frames": 25}, [25]),
        ({"initial_codec_chunk_frames": 40, "codec_chunk_frames": 15}, [15, 15]),  # clamped, as vllm-omni does
        ({}, [15]),
    ],
)
def test_chunk_schedule_follows_the_connector_keys(keys, expected):
    assert chunk_schedule(keys) == expected


@pytest.fixture(scope="module")
def invariant_codec():
    return moss_cli.load_codec(TINY_CODEC, device="cpu", dtype="float32", numerics=INVARIANT)


@pytest.mark.parametrize(
    "schedule, sizes",
    [
        ([1, 15], [1] + [15] * 8 + [9]),
        ([4, 4, 8, 15, 15], [4, 4, 8] + [15] * 7 + [9]),
        ([1000], [130]),
    ],
)
def test_streamed_pcm_is_bitwise_the_offline_pcm(invariant_codec, schedule, sizes):
    codes = torch.randint(0, 128, (130, 6))
    offline = invariant_codec.decode(codes.T.unsqueeze(1))[0]
    received = []
    stream = StreamingDecode(invariant_codec, schedule, sink=received.append)
    for frame in codes:
        stream.push(frame)
    streamed = stream.finish()
    assert [c.frames for c in stream.chunks] == sizes
    assert torch.equal(streamed, offline)
    assert torch.equal(torch.cat(received, dim=-1), offline)  # the sink saw every chunk, in order


def test_without_fixed_tiles_streaming_stays_within_rounding_of_offline(codec):
    assert codec.tiles is None  # the plain kernels: chunk boundaries may change the last bits
    codes = torch.randint(0, 128, (60, 6))
    offline = codec.decode(codes.T.unsqueeze(1))[0]
    stream = StreamingDecode(codec, [1, 15])
    for frame in codes:
        stream.push(frame)
    torch.testing.assert_close(stream.finish(), offline, atol=1e-4, rtol=1e-3)


def test_synth_stream_writes_the_same_files_and_reports_chunks_and_time_to_first_audio(tmp_path):
    runner = CliRunner()
    streamed = runner.invoke(app, ["synth", str(EXAMPLES / "voices.jsonl"), "--out", str(tmp_path / "s"), "--stream"])
    offline = runner.invoke(app, ["synth", str(EXAMPLES / "voices.jsonl"), "--out", str(tmp_path / "o")])
    assert streamed.exit_code == 0 and offline.exit_code == 0, streamed.output + offline.output
    a = pd.read_csv(tmp_path / "s" / "manifest.csv", dtype={"id": str})
    b = pd.read_csv(tmp_path / "o" / "manifest.csv", dtype={"id": str})
    assert list(a["pcm_sha256"]) == list(b["pcm_sha256"])
    for row in a.itertuples():
        assert (tmp_path / "s" / row.file).read_bytes() == (tmp_path / "o" / row.file).read_bytes()
        chunks = [int(c) for c in str(row.chunks).split()]
        assert sum(chunks) == row.frames and chunks[0] == 1  # the tiny recipe: initial chunk 1, then 15
        assert row.ttfa_s > 0
    assert b["chunks"].isna().all()


def test_audit_voices_and_streaming_pass_at_bitwise_level(tmp_path):
    import json

    result = CliRunner().invoke(
        app,
        [
            "audit-determinism",
            "--scenarios",
            "voices,streaming",
            "--level",
            "bitwise",
            "--json",
            str(tmp_path / "a.json"),
        ],
    )
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "a.json").read_text())
    assert set(report["summary"]["scenarios"]) == {"voices", "streaming"}
    assert report["streaming"]["schedule"] == [1, 15]
    used = next(iter(report["streaming"]["chunks"].values()))
    assert all(sizes[0] == 1 for sizes in used.values())


def test_the_invariant_codec_runs_tall_tiles_and_pads_short_ones_only_where_that_changes_no_bit(
    invariant_codec, monkeypatch
):
    """On this CPU every verified row count gives a row the bits of a full tile, so the codec runs
    256-row tiles and pads a short last tile to 4 rows; its waveform is the one 64-row tiles padded
    whole give. Where a library rounds differently per row count, the codec keeps those."""
    from types import SimpleNamespace

    from moss_cli.numerics import kernels, probes
    from moss_cli.numerics.layout import codec_tiles
    from moss_cli.numerics.tiles import RowTiles

    verified = RowTiles(256, 4, 64)
    assert invariant_codec.tiles == verified
    codes = torch.randint(0, 128, (6, 2, 37))
    tall = invariant_codec.decode(codes)
    invariant_codec.tiles = RowTiles.whole(64)
    try:
        assert torch.equal(invariant_codec.decode(codes), tall)
    finally:
        invariant_codec.tiles = verified

    def rounding_above(limit):  # a library whose rounding changes with the row count above `limit`
        def product(x, weight, bias=None):
            return kernels.linear(x, weight, bias) + (x.shape[0] > limit) * x.shape[0] * 1e-6

        return SimpleNamespace(linear=product, pack=kernels.pack)

    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", rounding_above(100))
    assert codec_tiles(invariant_codec, INVARIANT) == RowTiles(64, 4)
    monkeypatch.setattr(probes, "_VERDICTS", {})
    monkeypatch.setattr(probes, "kernels", rounding_above(0))
    assert codec_tiles(invariant_codec, INVARIANT) == RowTiles.whole(64)
