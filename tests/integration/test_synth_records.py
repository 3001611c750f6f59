"""What `moss synth` records says what really happened: why each request stopped, the seed that
drove it, its time to first audio, files it did not write, and what a dry run would skip."""

import json
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from cli_runs import write_rows  # tests/ is on sys.path
from typer.testing import CliRunner

from moss_cli.assets import TINY_DEPLOY
from moss_cli.cli.app import app
from moss_cli.config.requests import read_requests
from moss_cli.model import talker as talker_module
from moss_cli.model.codec import CodecStream
from moss_cli.pipeline import Synthesizer, SynthOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
runner = CliRunner()


def _stop_head(monkeypatch, choice: int, on_call=None):
    """Make the stop head pick `choice` (CONTINUE or STOP) with certainty, whatever the sampling."""

    def stop_logits(self, local_hidden):
        if on_call is not None:
            on_call()
        logits = torch.full((local_hidden.shape[0], 2), -1e4, dtype=local_hidden.dtype, device=local_hidden.device)
        logits[:, choice] = 0.0
        return logits

    monkeypatch.setattr(talker_module.MossTTSLocal, "stop_logits", stop_logits)


def test_manifest_says_why_each_request_stopped(tmp_path, monkeypatch):
    requests = write_rows(
        tmp_path / "r.jsonl", [{"id": "capped", "text": "Long enough to hit the cap.", "max_new_frames": 3}]
    )
    _stop_head(monkeypatch, talker_module.CONTINUE)
    result = runner.invoke(app, ["synth", str(requests), "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    manifest = pd.read_csv(tmp_path / "out" / "manifest.csv")
    assert list(manifest["stop_reason"]) == ["max_frames"] and list(manifest["frames"]) == [3]


def test_an_empty_result_is_reported_and_fail_on_empty_makes_it_an_error(tmp_path, monkeypatch):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "silent", "text": "Nothing comes out."}])
    _stop_head(monkeypatch, talker_module.STOP)
    out = tmp_path / "out"
    result = runner.invoke(app, ["synth", str(requests), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["empty"] == ["silent"] and summary["stop_reasons"]["empty"] == 1
    assert list(pd.read_csv(out / "manifest.csv")["stop_reason"]) == ["empty"]

    result = runner.invoke(app, ["synth", str(requests), "--out", str(tmp_path / "strict"), "--fail-on-empty"])
    assert result.exit_code == 1
    assert "produced no audio" in result.output and "silent" in result.output


def test_legacy_global_rng_records_the_global_seed_not_the_deploy_seed(tmp_path):
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "a", "text": "One."}, {"id": "b", "text": "Two.", "seed": 7}])
    result = runner.invoke(app, ["synth", str(requests), "--out", str(tmp_path / "out"), "--legacy-global-rng"])
    assert result.exit_code == 0, result.output
    manifest = pd.read_csv(tmp_path / "out" / "manifest.csv")
    assert set(manifest["seed_source"]) == {"global"}
    assert set(manifest["seed"]) == {
        yaml.safe_load(TINY_DEPLOY.read_text())["stages"][0]["default_sampling_params"]["seed"]
    }


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("chunk_frames, initial, expected", [(200, 0, 200 * 0.25 + 1.0), (15, 1, 0.25 + 1.0)])
def test_time_to_first_audio_is_first_chunk_delivery_minus_admission(
    tmp_path, monkeypatch, chunk_frames, initial, expected
):
    """Each decode step costs 0.25 s and each chunk decode 1 s on a fake clock: a 200-frame request
    whose first chunk holds all 200 frames gets its first audio 51 s after admission (it was -0.1 s
    with the old arithmetic); with a 1-frame first chunk, 1.25 s."""
    clock = FakeClock()
    _stop_head(monkeypatch, talker_module.CONTINUE, on_call=lambda: setattr(clock, "now", clock.now + 0.25))
    plain_decode = CodecStream.decode

    def slow_decode(self, codes):
        clock.now += 1.0
        return plain_decode(self, codes)

    monkeypatch.setattr(CodecStream, "decode", slow_decode)
    deploy = yaml.safe_load(TINY_DEPLOY.read_text())
    deploy["connectors"]["shm"]["extra"].update(codec_chunk_frames=chunk_frames, initial_codec_chunk_frames=initial)
    (tmp_path / "deploy.yaml").write_text(yaml.safe_dump(deploy))
    synth = Synthesizer(SynthOptions(device="cpu", deploy=tmp_path / "deploy.yaml"), clock=clock)
    requests = read_requests(
        write_rows(tmp_path / "r.jsonl", [{"id": "long", "text": "A long one.", "max_new_frames": 200}])
    )
    [result] = list(synth.run(synth.prepare(requests), stream=True))
    assert result.frames == 200
    assert result.time_to_first_audio == pytest.approx(expected)
    assert 0 < result.time_to_first_audio <= result.wall_s


def test_a_second_request_file_into_the_same_folder_keeps_every_row_of_the_first(tmp_path):
    """One folder, one manifest: the first file's rows stay (first), the second's are added, with --force
    too; an audio file that no row owns is listed, never deleted."""
    out = tmp_path / "out"
    first = write_rows(tmp_path / "first.jsonl", [{"id": "old-one", "text": "Earlier.", "max_new_frames": 2}])
    second = write_rows(tmp_path / "second.jsonl", [{"id": "new-one", "text": "Later.", "max_new_frames": 2}])
    assert runner.invoke(app, ["synth", str(first), "--out", str(out)]).exit_code == 0
    before = pd.read_csv(out / "manifest.csv")
    for force in ([], ["--force"]):
        result = runner.invoke(app, ["synth", str(second), "--out", str(out), "--json", *force])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["orphans"] == [] and summary["other_requests"] == ["old-one"]
        manifest = pd.read_csv(out / "manifest.csv")
        assert list(manifest["id"]) == ["old-one", "new-one"] and (out / "old-one.wav").is_file()
        pd.testing.assert_frame_equal(manifest.iloc[:1], before)
    (out / "stray.wav").write_bytes((out / "old-one.wav").read_bytes())
    result = runner.invoke(app, ["synth", str(second), "--out", str(out)], terminal_width=200)
    assert "not in the manifest: 1 audio file(s) that no run recorded here (kept): stray.wav" in result.stdout
    assert "the manifest also keeps the rows of 1 request(s) of another request file written here before: old-one" in (
        result.stdout
    )


def test_files_of_the_same_requests_in_another_format_are_not_called_another_request_files(tmp_path):
    out = tmp_path / "out"
    requests = write_rows(tmp_path / "r.jsonl", [{"id": "same-one", "text": "Both times.", "max_new_frames": 2}])
    assert runner.invoke(app, ["synth", str(requests), "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["synth", str(requests), "--out", str(out), "--format", "flac", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["orphans"] == [] and summary["other_formats"] == ["same-one.wav"]
    result = runner.invoke(app, ["synth", str(requests), "--out", str(out), "--format", "flac"], terminal_width=200)
    assert "another request file" not in result.stdout
    assert "1 audio file(s) of these requests in another format" in result.stdout and "same-one.wav" in result.stdout


def test_dry_run_into_a_finished_output_says_how_many_would_be_skipped(tmp_path):
    out = tmp_path / "out"
    requests = EXAMPLES / "lines.txt"
    assert runner.invoke(app, ["synth", str(requests), "--out", str(out)]).exit_code == 0
    before = {p.name: p.stat().st_mtime_ns for p in out.rglob("*")}
    result = runner.invoke(app, ["synth", str(requests), "--out", str(out), "--dry-run", "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["dry_run"] and summary["resumed"] == summary["requests"] == len(read_requests(requests))
    assert {p.name: p.stat().st_mtime_ns for p in out.rglob("*")} == before  # a dry run writes nothing
