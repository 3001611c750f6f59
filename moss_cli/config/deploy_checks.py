"""What a resolved deploy config must satisfy: keys vllm-omni knows, values in range, platform names
vllm-omni knows, and a model and stage layout that are MOSS-TTS-Local's (vllm-omni ships deploy files
for many models in one format; another model's file is refused, or with allow_foreign only warned
about). The key, value and platform checks return their problems, so that a file's problems are
reported together (DeployConfigError)."""

from __future__ import annotations

import difflib
import re
import warnings
from typing import Any

from ..errors import ConfigError
from ..validation import is_int64, is_integer, is_number
from .deploy_config import CODEC_STREAM_KEYS, DeployConfig
from .deploy_keys import (
    DIFFUSION_SAMPLING_KEYS,
    PLATFORM_KEYS,
    RUNTIME_KEYS,
    SAMPLING_KEYS,
    STAGE_KEYS,
    TOP_KEYS,
)
from .deploy_merge import Source, display_path

# vllm-omni's platforms (OmniPlatformEnum / builtin_omni_platform_plugins in vllm_omni/platforms/),
# plus "cpu", where moss itself runs.
VLLM_OMNI_PLATFORMS = ("cuda", "rocm", "npu", "xpu", "musa")
PLATFORMS = ("cpu", *VLLM_OMNI_PLATFORMS)
MODEL_RUNNERS = ("v1", "v2")


class DeployWarning(UserWarning):
    """A deploy file is usable but probably not what its author meant (shown, never fatal)."""


class DeployConfigError(ConfigError):
    """Every problem of a deploy file, one per line, each with its file, line and field."""

    def __init__(self, problems: list[ConfigError]) -> None:
        self.problems = problems
        first = problems[0]
        super().__init__(first.message, file=first.file, line=first.line, field=first.field)

    def describe(self) -> str:
        return "\n".join(problem.describe() for problem in self.problems)

    def __reduce__(self):  # a worker's error crosses to the driver pickled
        return type(self), (self.problems,)


def _problem(message: str, sources: dict[tuple, Source], path: tuple, file) -> ConfigError:
    """A ConfigError at the file and line of the value at `path` (or of the first value under it)."""
    src = sources.get(path) or _source_under(sources, path)
    return ConfigError(
        message,
        file=src.file if src and src.file else file,
        line=src.line if src else None,
        field=".".join(str(p) for p in path),
    )


def check_platform(platform: str) -> None:
    """Refuse a platform name vllm-omni (or moss, for cpu) does not know, suggesting the nearest."""
    if platform not in PLATFORMS:
        raise ConfigError(
            f"unknown platform {platform!r}{_did_you_mean(platform, PLATFORMS)}; expected one of "
            f"{', '.join(PLATFORMS)}",
            field="platform",
        )


def _did_you_mean(name: Any, choices) -> str:
    close = difflib.get_close_matches(str(name), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


# Why vllm-omni refuses an unknown key in each part of a stage (see deploy_keys.py).
NOT_AN_ENGINE_ARG = "vllm-omni refuses it as an engine argument no config owns"
NOT_A_SAMPLING_PARAM = "vLLM's SamplingParams has no such field"


def unknown_keys(tree: dict, sources: dict[tuple, Source], file, foreign: bool) -> list[ConfigError]:
    """A problem for each key of a stage (its engine_args, engine_extras, default_sampling_params)
    that vllm-omni refuses, in the merged tree before its stages are flattened (so `engine_args:`
    keeps its lines); a DeployWarning for each unknown key where vllm-omni ignores it (the top level,
    a platform section, a stage's runtime). `foreign`: another model's file, whose stages may be
    diffusion stages with their own sampling keys."""
    problems: list[ConfigError] = []
    sampling = SAMPLING_KEYS | DIFFUSION_SAMPLING_KEYS if foreign else SAMPLING_KEYS

    def check(mapping: Any, known: frozenset[str], path: tuple, refused: str | None = None) -> None:
        if not isinstance(mapping, dict):
            return
        where = ".".join(str(p) for p in path) or "the top level"
        for key in mapping:
            if key in known:
                continue
            message = f"unknown key {key!r} in {where}{_did_you_mean(key, known)}"
            if refused:
                problems.append(_problem(f"{message}: {refused}", sources, (*path, key), file))
            else:
                _warn(
                    f"{message}: vllm-omni ignores it",
                    sources.get((*path, key)) or _source_under(sources, (*path, key)),
                )

    def check_stages(stages: Any, path: tuple) -> None:
        for stage_id, stage in (stages if isinstance(stages, dict) else {}).items():
            at = (*path, stage_id)
            check(stage, STAGE_KEYS, at, NOT_AN_ENGINE_ARG)
            if not isinstance(stage, dict):
                continue
            check(stage.get("engine_args"), STAGE_KEYS, (*at, "engine_args"), NOT_AN_ENGINE_ARG)
            check(stage.get("engine_extras"), STAGE_KEYS, (*at, "engine_extras"), NOT_AN_ENGINE_ARG)
            check(
                stage.get("default_sampling_params"), sampling, (*at, "default_sampling_params"), NOT_A_SAMPLING_PARAM
            )
            check(stage.get("runtime"), RUNTIME_KEYS, (*at, "runtime"))

    check(tree, TOP_KEYS, ())
    check_stages(tree.get("stages"), ("stages",))
    connectors = tree.get("connectors")
    for name, connector in (connectors if isinstance(connectors, dict) else {}).items():
        extra = connector.get("extra") if isinstance(connector, dict) else None
        for key in extra if isinstance(extra, dict) else {}:
            close = difflib.get_close_matches(str(key), CODEC_STREAM_KEYS, n=1, cutoff=0.85)
            if key not in CODEC_STREAM_KEYS and close:  # a connector's other keys are its own: only near-misses
                path = ("connectors", name, "extra", key)
                _warn(
                    f"unknown key {key!r} in connectors.{name}.extra (did you mean {close[0]!r}?): vllm-omni's MOSS "
                    f"codec streaming reads {close[0]!r} and ignores this one, so its default applies "
                    "(model_executor/stage_input_processors/moss_tts.py:268-273), here as there",
                    sources.get(path) or _source_under(sources, path),
                )
    platforms = tree.get("platforms")
    for name, section in (platforms if isinstance(platforms, dict) else {}).items():
        check(section, PLATFORM_KEYS, ("platforms", name))
        if isinstance(section, dict):
            check_stages(section.get("stages"), ("platforms", name, "stages"))
    return problems


def validate(config: DeployConfig) -> list[ConfigError]:
    """The problems of stage 0's values and the codec streaming keys."""
    problems: list[ConfigError] = []

    def fail(message: str, *path) -> None:
        problems.append(_problem(message, config.sources, tuple(path), config.path))

    stages = config.data.get("stages")
    if not isinstance(stages, dict) or 0 not in stages:
        fail("no stage with stage_id 0 (the talker)", "stages")
        return problems
    stage0 = stages[0]
    for key in ("max_num_seqs", "max_model_len"):
        value = stage0.get(key)
        if value is not None and (not is_integer(value) or value < 1):
            fail(f"{key} must be a positive integer, got {value!r}", "stages", 0, key)
    params = stage0.get("default_sampling_params", {})
    path = ("stages", 0, "default_sampling_params")
    if not isinstance(params, dict):
        fail("default_sampling_params must be a mapping", *path)
        params = {}
    checks = {
        "temperature": (lambda v: is_number(v) and v >= 0, "a number >= 0"),
        "top_p": (lambda v: is_number(v) and 0 < v <= 1, "a number in (0, 1]"),
        "top_k": (lambda v: is_integer(v) and v >= -1, "an integer >= -1 (-1 or 0 disables it)"),
        "max_tokens": (lambda v: is_integer(v) and v >= 1, "a positive integer"),
        "repetition_penalty": (lambda v: is_number(v) and v > 0, "a number > 0"),
        "seed": (lambda v: is_int64(v), "an integer in the signed 64-bit range, or null"),
    }
    for key, (ok, expected) in checks.items():
        if params.get(key) is not None and not ok(params[key]):
            fail(f"{key} must be {expected}, got {params[key]!r}", *path, key)
    stream = config.codec_stream
    for key in ("codec_chunk_frames", "initial_codec_chunk_frames", "codec_left_context_frames"):
        least = 1 if key == "codec_chunk_frames" else 0
        if key in stream and not (is_integer(stream[key]) and stream[key] >= least):
            expected = "a positive integer" if least else "a non-negative integer"
            fail(f"{key} must be {expected}, got {stream[key]!r}", "connectors", config.codec_connector, "extra", key)
    return problems


def _warn(message: str, source: Source | None) -> None:
    """A DeployWarning that points at the YAML line (Python's warning display then quotes it)."""
    if source is not None and source.file is not None:
        warnings.warn_explicit(message, DeployWarning, display_path(source.file), source.line or 0)
    else:
        warnings.warn(message, DeployWarning, stacklevel=3)


def check_platform_sections(config: DeployConfig) -> list[ConfigError]:
    """model_runner must be v1 or v2 (vllm-omni refuses anything else). A `platforms:` key vllm-omni
    does not know is only a warning: vllm-omni ignores such a section silently, and an out-of-tree
    platform plugin may define more names, but a typo such as `cdua` would otherwise do nothing."""
    problems: list[ConfigError] = []

    def fail(message: str, *path) -> None:
        problems.append(_problem(message, config.sources, tuple(path), config.path))

    runner = config.data.get("model_runner")
    if runner is not None and runner not in MODEL_RUNNERS:
        fail(f"model_runner must be 'v1' or 'v2', got {runner!r}", "model_runner")
    sections = config.data.get("platforms")
    if sections is None:
        return problems
    if not isinstance(sections, dict):
        fail("'platforms' must be a mapping of platform name to overrides", "platforms")
        return problems
    for name, section in sections.items():
        if name not in PLATFORMS:
            _warn(
                f"platforms.{name}: {name!r} is not a platform vllm-omni knows{_did_you_mean(name, PLATFORMS)}; "
                f"this section never applies (known: {', '.join(PLATFORMS)})",
                _source_under(config.sources, ("platforms", name)),
            )
        if section is not None and not isinstance(section, dict):
            fail(f"platforms.{name} must be a mapping of overrides", "platforms", name)
        runner = section.get("model_runner") if isinstance(section, dict) else None
        if runner is not None and runner not in MODEL_RUNNERS:
            fail(f"model_runner must be 'v1' or 'v2', got {runner!r}", "platforms", name, "model_runner")
    return problems


def _source_under(sources: dict[tuple, Source], prefix: tuple) -> Source | None:
    """The source of the first value recorded under `prefix` (for a section, not a single value)."""
    for path, src in sources.items():
        if path[: len(prefix)] == prefix:
            return src
    return None


# What marks a deploy file as written for another model. vllm-omni's deploy files carry no model name
# (the pipeline topology is registered in code: MOSS_TTS_LOCAL_PIPELINE in
# vllm_omni/model_executor/models/moss_tts/pipeline.py: model_type moss_tts_local, arch
# MossTTSLocalModel, stages moss_tts_local (talker) and moss_tts_local_codec (MossTTSCodecDecoder)), so
# the signs are: a name that is not MOSS-TTS-Local's where a name may appear, a stage layout other
# than talker + codec, a processor function of another model, or settings only other models use.
IDENTITY_KEYS = (
    "pipeline",
    "model",
    "model_type",
    "model_arch",
    "architectures",
    "model_stage",
    "model_class_name",
    "hf_config_name",
)
PROCESSOR_KEYS = (
    "custom_process_input_func",
    "custom_process_next_stage_input_func",
    "async_chunk_process_next_stage_input_func",
    "sync_process_input_func",
)
OTHER_MODELS_KEYS = {"subtalker_sampling_params": "the sub-talker (code predictor) of Qwen3-TTS / Qwen3-Omni"}
MOSS_STAGES = {0: "talker", 1: "codec"}
DIFFUSION_ONLY_SAMPLING_KEYS = DIFFUSION_SAMPLING_KEYS - SAMPLING_KEYS


def _is_moss_local_name(value: Any) -> bool:
    squashed = re.sub(r"[^a-z0-9]", "", str(value).lower())
    return "mossttslocal" in squashed or squashed == "mossttscodecdecoder"


def _foreign_signs(config: DeployConfig) -> list[tuple[str, tuple]]:
    """(reason, path of the value that shows it) for everything that says 'not MOSS-TTS-Local'."""
    signs: list[tuple[str, tuple]] = []

    def names(mapping: dict, path: tuple) -> None:
        for key in IDENTITY_KEYS:
            value = mapping.get(key)
            for item in value if isinstance(value, list) else [value]:
                if item is not None and item != "" and not _is_moss_local_name(item):
                    signs.append((f"{key} {item!r} is not MOSS-TTS-Local", (*path, key)))
        for key in PROCESSOR_KEYS:
            value = mapping.get(key)
            if isinstance(value, str) and "moss_tts" not in value.lower():
                signs.append((f"{key} {value!r} is another model's stage processor", (*path, key)))

    names(config.data, ())
    for stage_id, stage in (config.data.get("stages") or {}).items():
        if stage_id not in MOSS_STAGES:
            layout = ", ".join(str(s) for s in config.data["stages"])
            signs.append(
                (
                    f"it has stages [{layout}], but MOSS-TTS-Local has two: 0 (talker) and 1 (codec)",
                    ("stages", stage_id, "stage_id"),
                )
            )
        if not isinstance(stage, dict):
            continue
        names(stage, ("stages", stage_id))
        extras = stage.get("engine_extras")
        if isinstance(extras, dict):
            names(extras, ("stages", stage_id, "engine_extras"))
        for key, meaning in OTHER_MODELS_KEYS.items():
            if key in stage:
                signs.append((f"stage {stage_id} sets {key}, which only {meaning} uses", ("stages", stage_id, key)))
        params = stage.get("default_sampling_params")
        for key in sorted(DIFFUSION_ONLY_SAMPLING_KEYS & set(params if isinstance(params, dict) else ())):
            signs.append(
                (
                    f"stage {stage_id} sets default_sampling_params.{key}, which only diffusion stages take",
                    ("stages", stage_id, "default_sampling_params", key),
                )
            )
    return signs


def check_model(config: DeployConfig, allow_foreign: bool) -> bool:
    """Whether the file is another model's (refused unless allow_foreign, then warned about)."""
    signs = _foreign_signs(config)
    if not signs:
        return False
    reason, path = signs[0]
    src = _source_under(config.sources, path)
    field = ".".join(str(p) for p in path)
    if not allow_foreign:
        raise ConfigError(
            f"not a MOSS-TTS-Local deploy file: {reason} (it looks written for another model; "
            "pass --allow-foreign-deploy to use it anyway)",
            file=src.file if src else config.path,
            line=src.line if src else None,
            field=field,
        )
    for reason, path in signs:
        _warn(
            f"{'.'.join(str(p) for p in path)}: {reason}; using it anyway (--allow-foreign-deploy)",
            _source_under(config.sources, path),
        )
    return True
