"""Deploy configs in the vllm-omni YAML format.

A deploy file has `stages:` (stage 0 = talker, stage 1 = codec), optional `connectors:` whose
`extra` holds codec streaming keys, an optional `base_config:` (another file, relative to this
one, merged under it) and optional `platforms: {cuda|rocm|npu|xpu|musa|cpu: overrides}` applied
for the device in use. Resolution follows vllm-omni's loader (`vllm_omni/config/stage_config.py`:
`resolve_deploy_yaml`, `_parse_stage_deploy`, `_apply_platform_overrides`):

- base_config chains: stages merge by `stage_id`; within a stage the *_params / engine dicts
  merge recursively, every other key is replaced whole; connectors merge recursively; platform
  sections merge per platform (their stages by `stage_id`); other top-level keys are replaced.
- a stage's `engine_args:` mapping and `runtime:` (devices, num_replicas, env) are flattened into
  the stage, as vllm-omni does before it applies the platform.
- the platform section for the device: `model_runner` replaces the file's; each platform stage
  entry applies only to a stage the file defines; the *_params / engine dicts merge one level
  deep, `env` merges, every other key (e.g. `compilation_config`) is replaced whole.

Keys vllm-omni understands but that mean nothing offline (devices, gpu_memory_utilization,
compilation_config, ...) are accepted and ignored; a key vllm-omni does not know (deploy_keys.py) is
refused, with every other problem of the file. A file that names another model or stage
layout (vllm-omni ships deploy files for many models in the same format) is refused unless the
caller allows it. Every resolved value remembers the file and line it came from, for
`moss config show` and for error messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..vllm_omni import AUDIO_SAMPLER_SHORT, STAGE0_NOTE
from .deploy_checks import (
    PLATFORMS,
    DeployConfigError,
    DeployWarning,
    check_model,
    check_platform,
    check_platform_sections,
    unknown_keys,
    validate,
)
from .deploy_config import DeployConfig
from .deploy_merge import (
    Source,
    apply_platform,
    flatten_stages,
    not_a_file,
    platform_notes,
    read_chain,
    unwrap,
    wrap,
)

__all__ = [
    "DeployConfig",
    "DeployConfigError",
    "DeployWarning",
    "Source",
    "PLATFORMS",
    "STAGE0_DRIVES",
    "DRIVES_NOTE",
    "load_deploy",
    "check_platform",
]

VLLM_OMNI_DEPLOY = "vllm-omni 0.30.0 vllm_omni/deploy/moss_tts_local.yaml"
BUILT_IN = f"built-in ({VLLM_OMNI_DEPLOY})"

# The MOSS-TTS-Local-Transformer-v1.5 stage defaults of vllm-omni's deploy file (the file is cited
# in BUILT_IN), used when no deploy file is given. Only the keys moss reads are kept.
V1_5_DEFAULTS: dict[str, Any] = {
    "stages": [
        {
            "stage_id": 0,
            "max_num_seqs": 64,
            "max_model_len": 4096,
            "default_sampling_params": {
                "temperature": 1.7,
                "top_p": 0.8,
                "top_k": 25,
                "max_tokens": 4096,
                "seed": 42,
                "repetition_penalty": 1.0,
            },
        },
        {
            "stage_id": 1,
            "max_num_seqs": 64,
            "max_model_len": 65536,
            "default_sampling_params": {
                "temperature": 0.0,
                "top_p": 1.0,
                "top_k": -1,
                "max_tokens": 65536,
                "seed": 42,
                "repetition_penalty": 1.0,
            },
        },
    ],
    "connectors": {
        "shm": {
            "name": "SharedMemoryConnector",
            "extra": {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 15, "codec_left_context_frames": 0},
        }
    },
}


# What each stage-0 key drives in a vllm-omni 0.30.0 MOSS-TTS-Local deployment and in moss, for
# `moss config show` (vllm-omni paths: the vllm_omni package of its 0.30.0 wheel).
NOT_AUDIO = f"not the audio (fixed {AUDIO_SAMPLER_SHORT.replace('/', ' / ')})"
STAGE0_DRIVES: dict[str, tuple[str, str]] = {
    "default_sampling_params.temperature": (NOT_AUDIO, NOT_AUDIO),
    "default_sampling_params.top_p": (NOT_AUDIO, NOT_AUDIO),
    "default_sampling_params.top_k": (NOT_AUDIO, NOT_AUDIO),
    "default_sampling_params.repetition_penalty": (NOT_AUDIO, NOT_AUDIO),
    "default_sampling_params.seed": (
        "seeded requests' stage seed; unseeded audio: global RNG (0.30.0), this seed (after the fix)",
        "the seed of unseeded requests",
    ),
    "default_sampling_params.max_tokens": (
        "frames when max_new_tokens is absent",
        "frames when max_new_frames is absent",
    ),
    "max_num_seqs": ("requests batched at once", "the default --max-batch"),
    "max_model_len": ("prompt + frames, at most", "prompt + frames, at most"),
}
DRIVES_NOTE = (
    f"{STAGE0_NOTE}; moss samples the same. An explicit request seed becomes the audio sampler's tts_local_seed "
    "(entrypoints/openai/serving_speech.py:2036-2044). A request's audio_* fields override the audio sampler in "
    "moss (local runs, Ray workers and moss serve); vllm-omni drops them."
)


def load_deploy(path: str | Path | None, platform: str = "cpu", allow_foreign: bool = False) -> DeployConfig:
    """Resolve a deploy file (base_config chain, then the `platforms.<platform>` section).
    `path=None` gives vllm-omni's MOSS-TTS-Local v1.5 defaults. A file that names another model or
    stage layout is an error, or with `allow_foreign` a DeployWarning. Unknown keys, bad values and
    bad platform sections raise one DeployConfigError that lists them all."""
    check_platform(platform)
    if path is None:
        tree = wrap(V1_5_DEFAULTS, None, BUILT_IN)
        file = None
    else:
        file = Path(path).expanduser()
        problem = not_a_file(file)
        if problem:
            raise ConfigError(f"deploy config {problem}", file=file)
        tree = read_chain(file, [])
    written_sources: dict[tuple, Source] = {}
    written = unwrap(tree, (), written_sources)  # as written (merged), for the key check
    tree = apply_platform(platform_notes(flatten_stages(tree)), platform)
    sources: dict[tuple, Source] = {}
    data = unwrap(tree, (), sources)
    config = DeployConfig(file, platform, data, sources)
    foreign = check_model(config, allow_foreign)  # first, alone: "wrong model" explains more than a bad value
    problems = [
        *check_platform_sections(config),
        *unknown_keys(written, written_sources, file, foreign),
        *validate(config),
    ]
    if problems:
        raise DeployConfigError(problems)
    return config
