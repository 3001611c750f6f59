"""The deploy-config layer: base_config, platforms, provenance, validation, seed precedence."""

import copy
from pathlib import Path

import pytest

from moss_cli.assets import TINY_DEPLOY
from moss_cli.config.deploy import load_deploy
from moss_cli.config.effective import effective, effective_seed, frame_budget
from moss_cli.config.requests import Request
from moss_cli.errors import ConfigError

RECIPES = Path(__file__).resolve().parent.parent / "recipes"

BASE = """\
async_chunk: true
connectors:
  shm:
    name: SharedMemoryConnector
    extra: {codec_chunk_frames: 15, initial_codec_chunk_frames: 1}
stages:
  - stage_id: 0
    max_num_seqs: 8
    max_model_len: 2048
    gpu_memory_utilization: 0.6
    compilation_config: {cudagraph_capture_sizes: [1, 2]}
    default_sampling_params: {temperature: 1.7, top_p: 0.8, top_k: 25, max_tokens: 100, seed: 42}
  - stage_id: 1
    default_sampling_params: {temperature: 0.0}
platforms:
  cuda:
    stages:
      - stage_id: 0
        max_num_seqs: 32
"""

OVERLAY = """\
base_config: base.yaml
connectors:
  shm:
    extra: {codec_chunk_frames: 25}
stages:
  - stage_id: 0
    compilation_config: {mode: 0}
    default_sampling_params: {top_k: 50}
platforms:
  cuda:
    stages:
      - stage_id: 0
        default_sampling_params: {temperature: 1.0}
  npu:
    stages:
      - stage_id: 0
        max_num_seqs: 4
"""


@pytest.fixture
def overlay(tmp_path) -> Path:
    (tmp_path / "base.yaml").write_text(BASE)
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "overlay.yaml"
    path.write_text(OVERLAY.replace("base.yaml", "../base.yaml"))
    return path


def test_base_config_is_resolved_relative_to_the_including_file_and_merged_under_it(overlay):
    config = load_deploy(overlay, "cpu")
    assert config.sampling == {"temperature": 1.7, "top_p": 0.8, "top_k": 50, "max_tokens": 100, "seed": 42}
    assert config.max_num_seqs == 8 and config.max_model_len == 2048
    assert config.codec_stream == {"codec_chunk_frames": 25, "initial_codec_chunk_frames": 1}
    # Within a stage, keys other than the *_params dicts are replaced whole, as vllm-omni does.
    assert config.stage(0)["compilation_config"] == {"mode": 0}
    assert config.stage(1)["default_sampling_params"] == {"temperature": 0.0}


def test_platform_section_applies_only_for_its_device(overlay):
    assert load_deploy(overlay, "cuda").max_num_seqs == 32
    assert load_deploy(overlay, "cuda").sampling["temperature"] == 1.0
    assert load_deploy(overlay, "cuda").sampling["top_k"] == 50
    assert load_deploy(overlay, "npu").max_num_seqs == 4
    assert load_deploy(overlay, "npu").sampling["temperature"] == 1.7


def test_every_value_knows_the_file_and_line_it_came_from(overlay):
    config = load_deploy(overlay, "cuda")
    top_k = config.source("stages", 0, "default_sampling_params", "top_k")
    assert top_k.file.endswith("overlay.yaml") and top_k.line == 8
    seed = config.source("stages", 0, "default_sampling_params", "seed")
    assert seed.file.endswith("base.yaml") and seed.line == 12
    temperature = config.source("stages", 0, "default_sampling_params", "temperature")
    assert temperature.note == "platforms.cuda" and temperature.file.endswith("overlay.yaml")


def test_base_config_cycles_are_rejected(tmp_path):
    (tmp_path / "a.yaml").write_text("base_config: b.yaml\nstages: [{stage_id: 0}]\n")
    (tmp_path / "b.yaml").write_text("base_config: a.yaml\n")
    with pytest.raises(ConfigError, match="cycle"):
        load_deploy(tmp_path / "a.yaml")


def test_missing_base_config_names_the_line(tmp_path):
    (tmp_path / "a.yaml").write_text("stages: [{stage_id: 0}]\nbase_config: nowhere.yaml\n")
    with pytest.raises(ConfigError) as err:
        load_deploy(tmp_path / "a.yaml")
    assert err.value.line == 2 and "nowhere.yaml" in err.value.message


def test_missing_stage_zero_and_bad_values_are_errors(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("stages: [{stage_id: 1}]\n")
    with pytest.raises(ConfigError, match="stage_id 0"):
        load_deploy(path)
    path.write_text("stages:\n  - stage_id: 0\n    default_sampling_params:\n      top_p: 1.5\n")
    with pytest.raises(ConfigError) as err:
        load_deploy(path)
    assert err.value.line == 4 and "top_p" in err.value.message
    path.write_text("stages: [{stage_id: 0}\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_deploy(path)
    path.write_text("stage_args: []\n")
    with pytest.raises(ConfigError, match="removed"):
        load_deploy(path)


def test_yaml_tags_that_build_python_objects_are_refused(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("stages: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="invalid YAML"):
        load_deploy(path)


def test_keys_only_a_server_understands_are_accepted(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("model_runner: v2\nsession_mode: turn\nstages:\n  - stage_id: 0\n    enforce_eager: true\n"
                    "    hf_overrides: {x: 1}\n    default_sampling_params: {detokenize: false, stop_token_ids: [1]}\n")
    assert load_deploy(path).sampling == {"detokenize": False, "stop_token_ids": [1]}


def test_shipped_recipes_carry_the_published_v1_5_defaults():
    seeded = load_deploy(RECIPES / "moss_tts_local_v1.5.yaml")
    assert seeded.sampling == {"temperature": 1.7, "top_p": 0.8, "top_k": 25, "max_tokens": 4096, "seed": 42,
                               "repetition_penalty": 1.0}
    assert seeded.stage(1)["default_sampling_params"]["temperature"] == 0.0
    unseeded = load_deploy(RECIPES / "moss_tts_local_v1.5_unseeded.yaml")
    assert unseeded.default_seed is None and unseeded.sampling["temperature"] == 1.7
    assert load_deploy(None).sampling == seeded.sampling
    assert (RECIPES / "moss_tts_local_tiny.yaml").read_text() == TINY_DEPLOY.read_text()


@pytest.mark.parametrize("request_seed, deploy_seed, expected", [
    (7, 42, (7, "request")),
    (0, 42, (0, "request")),  # an explicit 0 is a seed, not "unset"
    (None, 42, (42, "deploy")),
    (None, 0, (0, "deploy")),
    (None, None, (None, "none")),
    (3, None, (3, "request")),
])
def test_seed_precedence_request_then_deploy_then_none(request_seed, deploy_seed, expected):
    assert effective_seed(request_seed, deploy_seed) == expected


def test_resolving_requests_never_mutates_the_shared_defaults():
    config = load_deploy(TINY_DEPLOY)
    before = copy.deepcopy(config.data)
    req = Request(id="a", text="x", line=1, seed=5, max_new_frames=3,
                  sampling={"temperature": 0.5, "top_k": 3, "top_p": 0.5, "repetition_penalty": 1.3})
    eff = effective(req, config)
    assert eff.seed == 5 and eff.audio.temperature == 0.5 and eff.audio.top_k == 3
    eff.audio.__class__  # frozen dataclass: nothing to mutate
    config.sampling["seed"] = 999  # callers get a copy
    assert config.data == before
    other = effective(Request(id="b", text="y", line=2), config)
    assert other.seed == 42 and other.seed_source == "deploy" and other.audio.temperature == 1.7


def test_frame_budget_is_capped_by_max_tokens_and_the_model_length(tmp_path):
    config = load_deploy(TINY_DEPLOY)  # max_tokens 200, max_model_len 1024
    assert frame_budget(Request(id="a", text="x", line=1), config, 100) == 200
    assert frame_budget(Request(id="a", text="x", line=1, max_new_frames=10), config, 100) == 10
    assert frame_budget(Request(id="a", text="x", line=1, max_new_frames=5000), config, 100) == 200
    assert frame_budget(Request(id="a", text="x", line=1), config, 900) == 124


def test_temperature_zero_means_greedy():
    config = load_deploy(TINY_DEPLOY)
    assert not effective(Request(id="a", text="x", line=1, sampling={"temperature": 0.0}), config).do_sample
