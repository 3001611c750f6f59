"""`moss synth` on the embedded default: files, manifest, seeding, batch composition."""

import errno
import os
import random
import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
import soundfile as sf
from typer.testing import CliRunner

from moss_cli.cli.app import app
from moss_cli.config.requests import read_requests
from moss_cli.io.manifest import COLUMNS
from moss_cli.pipeline import Synthesizer, SynthOptions

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
RECIPES = Path(__file__).resolve().parents[2] / "recipes"
runner = CliRunner()


@pytest.fixture(scope="module")
def synthesizer():
    return Synthesizer(SynthOptions(device="cpu"))


def _codes(synthesizer, requests, max_batch):
    return {r.request.id: r.codes for r in synthesizer.run(synthesizer.prepare(requests), max_batch=max_batch)}


def _synth(*args) -> pd.DataFrame:
    result = runner.invoke(app, ["synth", *map(str, args)])
    assert result.exit_code == 0, result.output
    out = Path(args[args.index("--out") + 1])
    return pd.read_csv(out / "manifest.csv", dtype={"id": str})


def test_synth_writes_one_readable_audio_file_per_request_and_a_manifest(tmp_path):
    manifest = _synth(EXAMPLES / "requests.jsonl", "--out", tmp_path / "out")
    assert list(manifest.columns[: len(COLUMNS)]) == COLUMNS
    assert list(manifest["id"]) == [r.id for r in read_requests(EXAMPLES / "requests.jsonl")]
    for row in manifest.itertuples():
        data, rate = sf.read(tmp_path / "out" / f"{row.id}.wav", dtype="int16", always_2d=True)
        assert rate == row.sample_rate == 48000 and data.shape[1] == row.channels == 2
        assert data.shape[0] == row.frames * 3840 and abs(row.duration_s - row.frames * 0.08) < 1e-6
    assert set(manifest.loc[manifest["id"] == "seed-zero", "seed_source"]) == {"request"}
    assert set(manifest.loc[manifest["id"] == "greeting", "seed_source"]) == {"deploy"}


def test_pcm_hash_is_the_hash_of_the_samples_in_the_file(tmp_path):
    from moss_cli.io.audio import pcm_sha256

    manifest = _synth(EXAMPLES / "lines.txt", "--out", tmp_path / "out", "--format", "flac")
    for row in manifest.itertuples():
        data, _ = sf.read(tmp_path / "out" / row.file, dtype="int16", always_2d=True)
        assert pcm_sha256(data) == row.pcm_sha256


def test_unseeded_requests_under_the_seeded_recipe_are_reproducible(tmp_path):
    first = _synth(EXAMPLES / "requests.jsonl", "--out", tmp_path / "a")
    second = _synth(EXAMPLES / "requests.jsonl", "--out", tmp_path / "b", "--max-batch", "3")
    unseeded = first["seed_source"] == "deploy"
    assert unseeded.sum() >= 3 and set(first.loc[unseeded, "seed"]) == {42}
    assert list(first["pcm_sha256"]) == list(second["pcm_sha256"])


def test_explicit_seeds_zero_and_one_differ_from_each_other_and_from_the_deploy_seed(synthesizer):
    requests = [
        r
        for r in read_requests(EXAMPLES / "requests.jsonl")
        if r.id in ("greeting", "seed-zero", "seed-one", "greeting-again")
    ]
    assert len({r.text for r in requests}) == 1  # same text, different seeds
    first = _codes(synthesizer, requests, 4)
    again = _codes(synthesizer, requests, 2)
    assert not first["seed-zero"].equal(first["seed-one"])
    assert not first["seed-zero"].equal(first["greeting"]) and not first["seed-one"].equal(first["greeting"])
    assert first["greeting"].equal(first["greeting-again"])  # same text, same deploy seed
    assert all(first[k].equal(again[k]) for k in first)


def test_seedless_recipe_marks_unseeded_requests_none(tmp_path):
    manifest = _synth(
        EXAMPLES / "requests.csv", "--out", tmp_path / "out", "--deploy", RECIPES / "moss_tts_local_tiny_unseeded.yaml"
    )
    assert dict(zip(manifest["id"], manifest["seed_source"])) == {"csv-1": "none", "csv-2": "request", "csv-3": "none"}
    assert manifest.loc[manifest["id"] == "csv-1", "seed"].isna().all()


def test_codes_do_not_depend_on_max_batch_or_input_order(synthesizer):
    requests = read_requests(EXAMPLES / "requests.jsonl")
    alone = _codes(synthesizer, requests, 1)
    batched = _codes(synthesizer, requests, 4)
    shuffled = list(requests)
    random.Random(3).shuffle(shuffled)
    assert [r.id for r in shuffled] != [r.id for r in requests]
    reordered = _codes(synthesizer, shuffled, 3)
    for key, codes in alone.items():
        assert codes.equal(batched[key]) and codes.equal(reordered[key]), key


def test_legacy_global_rng_makes_codes_depend_on_the_batch():
    legacy = Synthesizer(SynthOptions(device="cpu", legacy_global_rng=True))
    requests = read_requests(EXAMPLES / "requests.jsonl")
    alone = _codes(legacy, requests, 1)
    batched = _codes(legacy, requests, 4)
    assert any(not alone[k].equal(batched[k]) for k in alone)
    assert all(alone[k].equal(v) for k, v in _codes(legacy, requests, 1).items())  # but it repeats itself


def test_batch_size_seen_reports_the_concurrency(tmp_path):
    one = _synth(EXAMPLES / "requests.jsonl", "--out", tmp_path / "one", "--max-batch", "1")
    four = _synth(EXAMPLES / "requests.jsonl", "--out", tmp_path / "four", "--max-batch", "4")
    assert set(one["batch_size_seen"]) == {1}
    assert four["batch_size_seen"].max() == 4


def test_json_summary_on_stdout(tmp_path):
    import json

    result = runner.invoke(app, ["synth", str(EXAMPLES / "lines.txt"), "--out", str(tmp_path / "o"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["requests"] == 3 and summary["audio_s"] > 0 and summary["real_time_factor"] > 0


def test_bad_request_file_exits_2_without_traceback_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "ok"}\n{"text": ""}\n')
    result = runner.invoke(app, ["synth", str(bad), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2
    assert "bad.jsonl:2 [text]" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "out").exists()


def test_config_show_prints_values_and_their_sources():
    result = runner.invoke(
        app, ["config", "show", "--deploy", str(RECIPES / "moss_tts_local_v1.5_unseeded.yaml"), "--json"]
    )
    assert result.exit_code == 0, result.output
    import json

    values = json.loads(result.stdout)["values"]
    assert values["default_sampling_params.seed"]["value"] is None
    assert "moss_tts_local_v1.5_unseeded.yaml:7" in values["default_sampling_params.seed"]["source"]
    assert "moss_tts_local_v1.5.yaml:" in values["default_sampling_params.temperature"]["source"]


def _refusal(tmp_path, out, monkeypatch=None) -> str:
    """Run synth into `out`, expecting exit 2 without a traceback and before any model loads."""
    if monkeypatch is not None:
        from moss_cli.pipeline.models import Models

        monkeypatch.setattr(Models, "load", lambda self: pytest.fail("a model loaded before the output check"))
    result = runner.invoke(app, ["synth", str(EXAMPLES / "lines.txt"), "--out", str(out)])
    assert result.exit_code == 2 and result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output and "Errno" not in result.output
    return " ".join(result.output.split())


def test_an_output_path_under_a_file_or_in_a_read_only_folder_is_refused_before_any_model_loads(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("")
    message = _refusal(tmp_path, tmp_path / "a-file" / "out", monkeypatch)
    assert f"{tmp_path / 'a-file' / 'out'} [--out]: cannot create it: {tmp_path / 'a-file'} is a file" in message
    # A read-only file system: access(2) says EROFS for writing, even to root (who ignores permission bits).
    (tmp_path / "ro").mkdir()
    real_access = os.access
    read_only = tmp_path / "ro"
    monkeypatch.setattr(
        os, "access", lambda p, mode: not (Path(p) == read_only and mode & os.W_OK) and real_access(p, mode)
    )
    assert f"{tmp_path / 'ro'} [--out]: directory is not writable" in _refusal(tmp_path, tmp_path / "ro", monkeypatch)
    message = _refusal(tmp_path, tmp_path / "ro" / "new" / "out", monkeypatch)
    assert f"cannot create it: {tmp_path / 'ro'} is not writable" in message


@pytest.mark.parametrize(
    "failure, cause",
    [(errno.EROFS, "read-only file system"), (errno.ENOSPC, "disk full"), (errno.EDQUOT, "disk quota exceeded")],
)
def test_a_failed_write_names_the_file_and_the_cause(tmp_path, monkeypatch, failure, cause):
    def refuse(self, data):
        raise OSError(failure, os.strerror(failure))

    monkeypatch.setattr(Path, "write_bytes", refuse)  # where each audio file is written
    message = _refusal(tmp_path, tmp_path / "out")
    ids = "|".join(r.id for r in read_requests(EXAMPLES / "lines.txt"))  # whichever finished first
    assert re.search(rf"{tmp_path / 'out'}/({ids})\.wav \[--out\]: cannot write it: {cause}", message), message
    assert not list((tmp_path / "out").glob("*.wav")) and not list((tmp_path / "out").glob(".*tmp*"))


def test_a_full_disk_while_streaming_says_so_although_libsndfile_only_says_system_error(tmp_path, monkeypatch):
    def refuse(self, data):
        raise sf.LibsndfileError(2, "System error.")

    monkeypatch.setattr(sf.SoundFile, "write", refuse)
    monkeypatch.setattr(shutil, "disk_usage", lambda path: shutil._ntuple_diskusage(100, 100, 0))
    result = runner.invoke(app, ["synth", str(EXAMPLES / "lines.txt"), "--out", str(tmp_path / "out"), "--stream"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "[--out]: cannot write it: disk full" in " ".join(result.output.split())
    assert not [p for p in (tmp_path / "out").iterdir() if p.suffix == ".wav" or ".tmp-" in p.name]
