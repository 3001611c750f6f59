"""The deploy-config layer: base_config, platforms, provenance, validation, seed precedence."""

import copy
import pickle
import re
import warnings
import zipfile
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from moss_cli.assets import TINY_DEPLOY
from moss_cli.cli.app import app
from moss_cli.config.deploy import DeployWarning, load_deploy
from moss_cli.config.effective import effective, effective_seed, frame_budget
from moss_cli.config.requests import Request
from moss_cli.errors import ConfigError
from moss_cli.sampling_params import HeadSampling

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CHAINS = Path(__file__).resolve().parents[1] / "data" / "deploy_chains"

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
    path.write_text(
        "model_runner: v2\nsession_mode: turn\nstages:\n  - stage_id: 0\n    enforce_eager: true\n"
        "    hf_overrides: {x: 1}\n    default_sampling_params: {detokenize: false, stop_token_ids: [1]}\n"
    )
    assert load_deploy(path).sampling == {"detokenize": False, "stop_token_ids": [1]}


# vllm_omni/deploy/moss_tts_local.yaml:33-39 in the vllm-omni 0.30.0 wheel.
VLLM_OMNI_V1_5 = {
    "temperature": 1.7,
    "top_p": 0.8,
    "top_k": 25,
    "max_tokens": 4096,
    "seed": 42,
    "repetition_penalty": 1.0,
}


def test_recipe_named_after_vllm_omnis_deploy_file_carries_vllm_omnis_values():
    seeded = load_deploy(RECIPES / "moss_tts_local_v1.5.yaml")
    assert seeded.sampling == VLLM_OMNI_V1_5 and seeded.max_num_seqs == 64 and seeded.max_model_len == 4096
    assert seeded.stage(1)["default_sampling_params"]["temperature"] == 0.0
    unseeded = load_deploy(RECIPES / "moss_tts_local_v1.5_unseeded.yaml")
    assert unseeded.default_seed is None and unseeded.sampling == {**VLLM_OMNI_V1_5, "seed": None}
    assert (RECIPES / "moss_tts_local_tiny.yaml").read_text() == TINY_DEPLOY.read_text()


def test_built_in_defaults_are_vllm_omnis_v1_5_deploy_values():
    built_in = load_deploy(None)
    recipe = load_deploy(RECIPES / "moss_tts_local_v1.5.yaml")
    assert built_in.sampling == recipe.sampling == VLLM_OMNI_V1_5
    assert (built_in.max_num_seqs, built_in.max_model_len) == (recipe.max_num_seqs, recipe.max_model_len)
    assert built_in.codec_stream == recipe.codec_stream
    assert "vllm-omni" in str(built_in.source("stages", 0, "default_sampling_params", "temperature"))


# --- chained deploy files, in the two shapes vllm-omni's MOSS-TTS-Local files have taken ---


def test_thin_file_over_full_base_resolves_per_platform():
    path = CHAINS / "base_first" / "local_mrv2.yaml"
    cpu = load_deploy(path, "cpu")
    assert cpu.sampling == {
        "temperature": 0.9,
        "top_p": 0.9,
        "top_k": 40,
        "max_tokens": 2000,
        "seed": 7,
        "repetition_penalty": 1.05,
    }
    assert cpu.data["model_runner"] == "v2" and cpu.max_num_seqs == 24
    assert cpu.stage(1)["compilation_config"] == {"cudagraph_capture_sizes": [1, 2, 4], "cudagraph_num_of_warmups": 2}
    cuda = load_deploy(path, "cuda")
    assert cuda.sampling == cpu.sampling
    # The nested platform layout: engine_args become stage keys, runtime sets devices and merges env.
    assert cuda.max_num_seqs == 32 and cuda.stage(0)["max_num_batched_tokens"] == 512
    assert cuda.stage(0)["devices"] == "1" and cuda.stage(0)["env"] == {"A": "1", "B": "2"}
    assert "engine_args" not in cuda.stage(0)
    # A platform's compilation_config replaces the base's as a whole (no cudagraph_num_of_warmups left).
    assert cuda.stage(1)["compilation_config"] == {
        "mode": 0,
        "cudagraph_mode": "FULL",
        "cudagraph_capture_sizes": [1, 2],
    }
    assert load_deploy(path, "npu").data["model_runner"] == "v1"


def test_thin_default_over_full_runner_profile_resolves_per_platform():
    path = CHAINS / "swapped" / "local.yaml"
    cpu = load_deploy(path, "cpu")
    assert cpu.sampling == {
        "temperature": 0.8,
        "top_p": 0.85,
        "top_k": 30,
        "max_tokens": 1500,
        "seed": 11,
        "repetition_penalty": 1.2,
    }
    # A stage's engine_args mapping is read as stage keys, as vllm-omni's _parse_stage_deploy does.
    assert (cpu.max_num_seqs, cpu.max_model_len) == (48, 2500)
    assert cpu.data["model_runner"] == "v2"
    cuda = load_deploy(path, "cuda")
    assert cuda.sampling == {**cpu.sampling, "top_k": 20}
    assert cuda.stage(1)["compilation_config"] == {"mode": 0, "cudagraph_capture_sizes": [1, 4]}
    # The thin file's platform section merges with the base's instead of replacing it.
    assert cuda.data["platforms"]["cuda"]["cuda_mps"] is True
    top_k = cuda.source("stages", 0, "default_sampling_params", "top_k")
    assert top_k.file.endswith("local_mrv2.yaml") and top_k.note == "platforms.cuda"
    assert load_deploy(path, "npu").data["model_runner"] == "v1"


def test_platform_overrides_merge_params_one_level_and_skip_stages_the_file_lacks(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "stages:\n  - stage_id: 0\n    engine_extras: {hf_overrides: {a: 1, b: 2}}\n"
        "platforms:\n  cuda:\n    stages:\n"
        "      - stage_id: 0\n        engine_extras: {hf_overrides: {a: 3}}\n"
        "      - stage_id: 1\n        max_num_seqs: 4\n"
    )
    cuda = load_deploy(path, "cuda")
    assert cuda.stage(0)["engine_extras"] == {"hf_overrides": {"a": 3}}  # vllm-omni: {**base, **override}
    assert set(cuda.data["stages"]) == {0}


# --- deploy files of other models ---


def test_deploy_file_of_another_model_is_refused_with_the_reason():
    with pytest.raises(ConfigError) as err:
        load_deploy(CHAINS / "foreign" / "qwen3_tts_like.yaml")
    assert "not a MOSS-TTS-Local deploy file" in err.value.message
    assert "subtalker_sampling_params" in err.value.message and "--allow-foreign-deploy" in err.value.message
    assert err.value.file.endswith("qwen3_tts_like.yaml") and err.value.line is not None
    with pytest.raises(ConfigError, match="0 \\(talker\\) and 1 \\(codec\\)"):
        load_deploy(CHAINS / "foreign" / "three_stages.yaml")


def test_allow_foreign_turns_the_refusal_into_a_warning():
    with pytest.warns(DeployWarning, match="subtalker_sampling_params"):
        config = load_deploy(CHAINS / "foreign" / "qwen3_tts_like.yaml", allow_foreign=True)
    assert config.sampling["temperature"] == 0.8


@pytest.mark.parametrize(
    "text, reason",
    [
        ("pipeline: qwen3_tts\nstages: [{stage_id: 0}]\n", "pipeline 'qwen3_tts'"),
        (
            "stages:\n  - stage_id: 0\n    engine_args: {model_arch: Qwen3TTSTalkerForConditionalGeneration}\n",
            "model_arch 'Qwen3TTSTalkerForConditionalGeneration'",
        ),
        ("stages:\n  - stage_id: 0\n    model_stage: thinker\n", "model_stage 'thinker'"),
        (
            "stages:\n  - stage_id: 0\n    custom_process_input_func: vllm_omni.x.qwen3_tts.talker2code2wav\n",
            "another model's stage processor",
        ),
    ],
)
def test_names_of_other_models_are_refused(tmp_path, text, reason):
    path = tmp_path / "d.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(reason)):
        load_deploy(path)


def test_moss_tts_local_names_are_accepted(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "model: OpenMOSS-Team/MOSS-TTS-Local-Transformer-v1.5\npipeline: moss_tts_local\nstages:\n"
        "  - stage_id: 0\n    model_arch: MossTTSLocalModel\n    model_stage: moss_tts_local\n"
        "  - stage_id: 1\n    model_arch: MossTTSCodecDecoder\n    model_stage: moss_tts_local_codec\n"
    )
    assert load_deploy(path).stage(1)["model_arch"] == "MossTTSCodecDecoder"


# --- names and paths ---


def test_unknown_platform_is_refused_with_a_suggestion():
    with pytest.raises(ConfigError, match="unknown platform 'cdua' \\(did you mean 'cuda'\\?\\)"):
        load_deploy(TINY_DEPLOY, "cdua")
    with pytest.raises(ConfigError, match="'tpu'.*cpu, cuda, rocm, npu, xpu, musa"):
        load_deploy(TINY_DEPLOY, "tpu")
    assert load_deploy(TINY_DEPLOY, "musa").max_num_seqs == 8


def test_unknown_platform_section_in_a_file_is_a_warning_naming_its_line(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("stages: [{stage_id: 0}]\nplatforms:\n  cdua:\n    model_runner: v2\n")
    with pytest.warns(DeployWarning, match="'cdua' is not a platform vllm-omni knows \\(did you mean 'cuda'") as caught:
        load_deploy(path, "cuda")
    assert caught[0].lineno == 4 and caught[0].filename.endswith("d.yaml")


def test_a_near_miss_of_a_codec_streaming_key_is_a_warning_naming_the_key_moss_reads(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "stages: [{stage_id: 0}]\nconnectors:\n  shm:\n    extra:\n      codec_chunk_frame: 5\n"
        "      connector_get_max_wait: 300\n"
    )
    with pytest.warns(
        DeployWarning, match="'codec_chunk_frame' in connectors.shm.extra \\(did you mean 'codec_chunk_frames'"
    ) as caught:
        config = load_deploy(path, "cpu")
    assert len(caught) == 1 and caught[0].lineno == 5  # the connector's own keys are not questioned
    assert "codec_chunk_frames" not in config.codec_stream  # the default applies, as in vllm-omni


def test_model_runner_must_be_v1_or_v2(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text("stages: [{stage_id: 0}]\nplatforms:\n  npu:\n    model_runner: v3\n")
    with pytest.raises(ConfigError) as err:
        load_deploy(path, "cpu")
    assert err.value.line == 4 and err.value.field == "platforms.npu.model_runner"


def test_a_directory_given_as_a_deploy_file_is_named_as_such(tmp_path):
    with pytest.raises(ConfigError, match="is a directory, expected a YAML file"):
        load_deploy(tmp_path)
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.yaml").write_text("base_config: sub\nstages: [{stage_id: 0}]\n")
    with pytest.raises(ConfigError, match="base_config 'sub' is a directory, expected a YAML file") as err:
        load_deploy(tmp_path / "a.yaml")
    assert err.value.line == 1


# --- the CLI ---


def test_cli_refuses_a_foreign_deploy_and_allows_it_on_request(tmp_path):
    foreign = str(CHAINS / "foreign" / "qwen3_tts_like.yaml")
    refused = CliRunner().invoke(
        app, ["synth", str(EXAMPLES / "lines.txt"), "--deploy", foreign, "--dry-run", "--out", str(tmp_path / "out")]
    )
    assert refused.exit_code == 2 and "not a MOSS-TTS-Local deploy file" in refused.output
    allowed = CliRunner().invoke(
        app,
        [
            "synth",
            str(EXAMPLES / "lines.txt"),
            "--deploy",
            foreign,
            "--dry-run",
            "--allow-foreign-deploy",
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert allowed.exit_code == 0, allowed.output
    assert "warning:" in allowed.output and "subtalker_sampling_params" in allowed.output  # one readable line
    shown = CliRunner().invoke(app, ["config", "show", "--deploy", foreign, "--allow-foreign-deploy"])
    assert shown.exit_code == 0 and "warning:" in shown.output and "subtalker_sampling_params" in shown.output
    audit = CliRunner().invoke(app, ["audit-determinism", "--deploy", foreign, "--scenarios", "repeat"])
    assert audit.exit_code == 2 and "not a MOSS-TTS-Local deploy file" in audit.output
    audit = CliRunner().invoke(
        app,
        [
            "audit-determinism",
            "--deploy",
            foreign,
            "--allow-foreign-deploy",
            "--golden",
            str(tmp_path / "missing.json"),
        ],
    )
    assert audit.exit_code == 2 and "golden file does not exist" in audit.output  # the flag itself is accepted


def test_cli_config_show_refuses_an_unknown_platform():
    result = CliRunner().invoke(app, ["config", "show", "--platform", "tpu"])
    assert result.exit_code == 2 and "unknown platform 'tpu'" in result.output and "Traceback" not in result.output


def test_cli_config_show_takes_the_deploy_file_as_an_argument_or_with_deploy():
    v15 = str(RECIPES / "moss_tts_local_v1.5.yaml")
    shown = [CliRunner().invoke(app, ["config", "show", *given, "--json"]) for given in ([v15], ["--deploy", v15])]
    assert [r.exit_code for r in shown] == [0, 0], [r.output for r in shown]
    assert shown[0].output == shown[1].output and f'"deploy": "{v15}"' in shown[0].output
    for extra in (["--deploy", v15], ["--builtin"]):  # the file, and something else it could mean
        twice = CliRunner().invoke(app, ["config", "show", v15, *extra])
        assert twice.exit_code == 2 and f"error: [{extra[0]}]:" in twice.output, twice.output


@pytest.mark.parametrize(
    "request_seed, deploy_seed, expected",
    [
        (7, 42, (7, "request")),
        (0, 42, (0, "request")),  # an explicit 0 is a seed, not "unset"
        (None, 42, (42, "deploy")),
        (None, 0, (0, "deploy")),
        (None, None, (None, "none")),
        (3, None, (3, "request")),
    ],
)
def test_seed_precedence_request_then_deploy_then_none(request_seed, deploy_seed, expected):
    assert effective_seed(request_seed, deploy_seed) == expected


def test_resolving_requests_never_mutates_the_shared_defaults():
    config = load_deploy(TINY_DEPLOY)
    before = copy.deepcopy(config.data)
    req = Request(
        id="a",
        text="x",
        line=1,
        seed=5,
        max_new_frames=3,
        sampling={"audio_temperature": 0.5, "audio_top_k": 3, "audio_top_p": 0.5, "audio_repetition_penalty": 1.3},
    )
    eff = effective(req, config)
    assert eff.seed == 5 and eff.audio.temperature == 0.5 and eff.audio.top_k == 3
    eff.audio.__class__  # frozen dataclass: nothing to mutate
    config.sampling["seed"] = 999  # callers get a copy
    assert config.data == before
    other = effective(Request(id="b", text="y", line=2), config)
    assert other.seed == 42 and other.seed_source == "deploy" and other.audio.temperature == 1.7


def test_a_requests_frames_replace_max_tokens_within_the_model_length(tmp_path):
    config = load_deploy(TINY_DEPLOY)  # max_tokens 200, max_model_len 1024
    assert frame_budget(Request(id="a", text="x", line=1), config, 100) == 200
    assert frame_budget(Request(id="a", text="x", line=1, max_new_frames=10), config, 100) == 10
    # vllm-omni replaces max_tokens by the request's max_new_tokens, larger too (tts_adapters/base.py:108-120)
    assert frame_budget(Request(id="a", text="x", line=1, max_new_frames=300), config, 100) == 300
    assert frame_budget(Request(id="a", text="x", line=1, max_new_frames=5000), config, 100) == 924
    assert frame_budget(Request(id="a", text="x", line=1), config, 900) == 124


def test_audio_temperature_zero_means_greedy():
    config = load_deploy(TINY_DEPLOY)
    assert not effective(Request(id="a", text="x", line=1, sampling={"audio_temperature": 0.0}), config).do_sample


def test_stage_0_sampling_values_do_not_reach_the_audio_as_in_vllm_omni(tmp_path):
    """vllm-omni 0.30.0 samples MOSS-TTS-Local audio at 1.7 / 0.8 / 25 / 1.0 and the stop gate at
    1.0 / 1.0 / 50, whatever stage 0 says (modeling_moss_tts_talker.py:1634-1654); so does moss.
    Stage 0's seed still applies."""
    other = tmp_path / "other.yaml"
    other.write_text(
        "base_config: " + str(RECIPES / "moss_tts_local_v1.5.yaml") + "\n"
        "stages:\n  - stage_id: 0\n    default_sampling_params:\n"
        "      {temperature: 0.0, top_p: 0.95, top_k: 50, repetition_penalty: 1.1, seed: 7}\n"
    )
    request = Request(id="a", text="x", line=1)
    shipped, changed = (
        effective(request, load_deploy(RECIPES / "moss_tts_local_v1.5.yaml")),
        effective(request, load_deploy(other)),
    )
    assert shipped.audio == changed.audio == HeadSampling(1.7, 0.8, 25, 1.0)
    assert shipped.stop == changed.stop == HeadSampling(1.0, 1.0, 50, 1.0)
    assert changed.do_sample and (shipped.seed, changed.seed) == (42, 7)


# --- keys vllm-omni does not know ---

WHEEL = Path(__file__).resolve().parents[2] / ".cache" / "vllm-omni" / "vllm_omni-0.30.0-py3-none-any.whl"


def test_a_typo_in_a_stage_is_refused_with_every_other_problem_of_the_file(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "stages:\n"
        "  - stage_id: 0\n"
        "    max_num_sqs: 8\n"
        "    max_model_len: 0\n"
        "    runtime: {devices: '0'}\n"
        "    default_sampling_params: {sed: 42, top_p: 2}\n"
        "  - stage_id: 1\n"
        "    engine_args: {max_model_lenn: 10}\n"
    )
    with pytest.raises(ConfigError) as err:
        load_deploy(path)
    lines = str(err.value).splitlines()
    assert [re.sub(r"^.*?:(\d+) \[(.*?)\].*$", r"\1 \2", line) for line in lines] == [
        "3 stages.0.max_num_sqs",
        "6 stages.0.default_sampling_params.sed",
        "8 stages.1.engine_args.max_model_lenn",
        "4 stages.0.max_model_len",
        "6 stages.0.default_sampling_params.top_p",
    ]
    assert "did you mean 'max_num_seqs'" in lines[0] and "did you mean 'seed'" in lines[1]
    assert "SamplingParams has no such field" in lines[1]
    assert pickle.loads(pickle.dumps(err.value)).describe() == str(err.value)  # as a scale-out worker sends it


def test_unknown_keys_where_vllm_omni_ignores_them_only_warn(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "conectors: {}\nstages:\n  - stage_id: 0\n    runtime: {device: '0'}\nplatforms:\n  cuda: {cuda_mps: true}\n"
    )
    with pytest.warns(DeployWarning) as caught:
        load_deploy(path)
    messages = sorted(str(w.message) for w in caught)
    assert any("'conectors' in the top level (did you mean 'connectors'?)" in m for m in messages)
    assert any("'device' in stages.0.runtime (did you mean 'devices'?)" in m for m in messages)
    assert any("'cuda_mps' in platforms.cuda" in m for m in messages)


def test_a_diffusion_sampling_key_marks_the_file_as_another_models(tmp_path):
    path = tmp_path / "d.yaml"
    path.write_text(
        "stages:\n  - stage_id: 0\n  - stage_id: 1\n    default_sampling_params: {num_inference_steps: 4}\n"
    )
    with pytest.raises(ConfigError, match="only diffusion stages take"):
        load_deploy(path)
    with pytest.warns(DeployWarning, match="num_inference_steps"):
        load_deploy(path, allow_foreign=True)


@pytest.mark.skipif(not WHEEL.exists(), reason=f"{WHEEL} is absent: scripts/setup.sh downloads it")
@pytest.mark.parametrize("platform", ["cpu", "cuda", "rocm", "npu", "xpu", "musa"])
def test_every_deploy_file_of_the_vllm_omni_wheel_loads(platform, tmp_path):
    """Keys vllm-omni knows are never refused: every deploy file its wheel ships loads (another
    model's with --allow-foreign-deploy). glm_tts.yaml's codec_chunk_frames is a list (a ramp) that
    moss's codec streaming cannot take; qwen3_tts_forced_aligner.yaml is not a deploy file."""
    with zipfile.ZipFile(WHEEL) as wheel:
        names = [n for n in wheel.namelist() if n.startswith("vllm_omni/deploy/") and n.endswith(".yaml")]
        wheel.extractall(tmp_path, names)
    loaded = 0
    for name in names:
        path = tmp_path / name
        if "stages" not in (yaml.safe_load(path.read_text()) or {}):
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeployWarning)
            if path.name == "glm_tts.yaml":
                with pytest.raises(
                    ConfigError, match=r"^\S+:\d+ \[connectors\.\w+\.extra\.codec_chunk_frames\][^\n]*$"
                ):
                    load_deploy(path, platform, allow_foreign=True)
                continue
            load_deploy(path, platform, allow_foreign=True)
        loaded += 1
    assert loaded > 100
