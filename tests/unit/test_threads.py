"""The default CPU thread count follows the size of the work, and idle OpenMP threads sleep."""

import json
import os
import subprocess
import sys

import pytest
import torch

from moss_cli.assets import TINY_TALKER
from moss_cli.model.config import TalkerConfig
from moss_cli.model.talker import MossTTSLocal
from moss_cli.pipeline import Synthesizer, SynthOptions
from moss_cli.threads import SMALL_MODEL_PARAMS, SPIN_ENV, default_threads, talker_parameters

V1_5_BACKBONE = dict(
    hidden_size=2560,
    num_hidden_layers=36,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=9728,
    vocab_size=151936,
)


@pytest.fixture
def restore_threads():
    yield
    torch.set_num_threads(1)


def _tiny_config() -> TalkerConfig:
    return TalkerConfig.from_dict(json.loads((TINY_TALKER / "config.json").read_text()))


def test_parameter_estimate_matches_the_release_talker_and_the_tiny_one():
    raw = json.loads((TINY_TALKER / "config.json").read_text())
    for key in ("qwen3_config", "language_config"):
        raw[key] = {**raw[key], **V1_5_BACKBONE}
    raw["gpt2_config"] = {**raw["gpt2_config"], "n_embd": 2560, "n_inner": 9728}
    raw.update(
        n_vq=12, audio_codebook_sizes=[1024] * 12, audio_vocab_size=1024, audio_pad_code=1024, audio_pad_token_id=1024
    )
    release = talker_parameters(TalkerConfig.from_dict(raw))
    assert 3.9e9 < release < 4.3e9  # ~4.1 B (DESIGN.md 4c)
    with torch.device("meta"):  # the tiny model's shapes, no weights read
        tiny = sum(p.numel() for p in MossTTSLocal(_tiny_config()).parameters())
    assert talker_parameters(_tiny_config()) == pytest.approx(tiny, rel=0.25)


def test_small_models_default_to_one_thread_and_large_ones_to_every_core():
    assert default_threads(SMALL_MODEL_PARAMS - 1, available=8) == 1
    assert default_threads(4_000_000_000, available=8) == 8


def test_synthesizer_picks_one_thread_for_the_tiny_model_unless_told(monkeypatch, restore_threads):
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        monkeypatch.delenv(name, raising=False)
    torch.set_num_threads(2)
    assert Synthesizer(SynthOptions(device="cpu")).threads == torch.get_num_threads() == 1
    assert Synthesizer(SynthOptions(device="cpu", threads=2)).threads == torch.get_num_threads() == 2


def test_user_thread_environment_is_respected(monkeypatch, restore_threads):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    torch.set_num_threads(2)
    assert Synthesizer(SynthOptions(device="cpu")).threads == 2


def _fresh_python(code: str, env: dict) -> str:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_the_cli_makes_idle_openmp_threads_sleep_unless_the_user_chose():
    env = {k: v for k, v in os.environ.items() if k not in SPIN_ENV}
    code = "import os, moss_cli.cli.app; print(os.environ.get('OMP_WAIT_POLICY'))"
    assert _fresh_python(code, env) == "PASSIVE"
    assert _fresh_python(code, {**env, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"
    assert _fresh_python(code, {**env, "GOMP_SPINCOUNT": "1000"}) == "None"  # a spin choice of the user's
