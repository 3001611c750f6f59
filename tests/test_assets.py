"""The shipped tiny checkpoints: reproducible provenance, small, fast."""

import time

import torch

import moss_cli
from moss_cli.assets import ASSETS, TINY_CODEC, TINY_TALKER
from moss_cli.assets.build import build


def test_regenerating_the_tiny_checkpoints_gives_byte_identical_files(tmp_path):
    build(tmp_path)
    for shipped in (TINY_TALKER, TINY_CODEC):
        for path in shipped.iterdir():
            regenerated = tmp_path / shipped.name / path.name
            assert regenerated.read_bytes() == path.read_bytes(), f"{path.name} differs from a fresh build"
        assert sorted(p.name for p in (tmp_path / shipped.name).iterdir()) == sorted(p.name for p in shipped.iterdir())


def test_tiny_checkpoints_stay_small():
    total = sum(p.stat().st_size for p in ASSETS.glob("*/*") if p.is_file())
    assert total < 5 * 1024 * 1024


def test_tiny_model_synthesises_two_seconds_quickly(talker32, codec):
    prompt = talker32.prompt("A two second utterance.")
    start = time.perf_counter()
    codes = talker32.generate(*talker32.batch([prompt]), max_new_frames=25, do_sample=False)[0]
    audio = codec.decode(codes.T.unsqueeze(1))
    elapsed = time.perf_counter() - start
    assert audio.shape == (1, 2, 25 * 3840)  # 2.0 s at 48 kHz
    print(f"2.0 s of audio in {elapsed:.3f} s")  # a figure, not an assertion: timing belongs in benchmarks
