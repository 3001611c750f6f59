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
compilation_config, ...) are accepted and ignored. A file that names another model or stage
layout (vllm-omni ships deploy files for many models in the same format) is refused unless the
caller allows it. Every resolved value remembers the file and line it came from, for
`moss config show` and for error messages.
"""

from __future__ import annotations

import copy
import difflib
import re
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .yaml_lines import line_of, load_yaml

MERGED_STAGE_KEYS = {"default_sampling_params", "default_pooling_params", "subtalker_sampling_params",
                     "engine_extras", "engine_args"}
# Stage keys vllm-omni never takes from a stage's `engine_args:` mapping (_STAGE_RESERVED_KEYS).
STAGE_RESERVED_KEYS = {"async_chunk", "stage_id", "devices", "num_replicas", "env", "output_connectors",
                       "input_connectors", "default_sampling_params", "default_pooling_params", "engine_extras",
                       "engine_args", "runtime"}
CODEC_STREAM_KEYS = ("codec_chunk_frames", "initial_codec_chunk_frames", "codec_chunk_ramp",
                     "codec_left_context_frames")
# vllm-omni's platforms (OmniPlatformEnum / builtin_omni_platform_plugins in vllm_omni/platforms/),
# plus "cpu", where moss itself runs.
VLLM_OMNI_PLATFORMS = ("cuda", "rocm", "npu", "xpu", "musa")
PLATFORMS = ("cpu", *VLLM_OMNI_PLATFORMS)
MODEL_RUNNERS = ("v1", "v2")

VLLM_OMNI_DEPLOY = "vllm-omni vllm_omni/deploy/moss_tts_local.yaml @ 86406a44"
BUILT_IN = f"built-in ({VLLM_OMNI_DEPLOY})"

# The MOSS-TTS-Local-Transformer-v1.5 stage defaults of vllm-omni's deploy file (the file is cited
# in BUILT_IN), used when no deploy file is given. Only the keys moss reads are kept.
V1_5_DEFAULTS: dict[str, Any] = {
    "stages": [
        {"stage_id": 0, "max_num_seqs": 64, "max_model_len": 4096,
         "default_sampling_params": {"temperature": 1.0, "top_p": 0.95, "top_k": 50, "max_tokens": 4096,
                                     "seed": 42, "repetition_penalty": 1.1}},
        {"stage_id": 1, "max_num_seqs": 64, "max_model_len": 65536,
         "default_sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "max_tokens": 65536,
                                     "seed": 42, "repetition_penalty": 1.0}},
    ],
    "connectors": {"shm": {"name": "SharedMemoryConnector",
                           "extra": {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 15,
                                     "codec_left_context_frames": 0}}},
}


class DeployWarning(UserWarning):
    """A deploy file is usable but probably not what its author meant (shown, never fatal)."""


@dataclass(frozen=True)
class Source:
    file: str | None
    line: int | None
    note: str = ""

    def __str__(self) -> str:
        if self.file is None:
            return self.note or BUILT_IN
        where = _display_path(self.file)
        where = f"{where}:{self.line}" if self.line else where
        return f"{where} ({self.note})" if self.note else where


def _display_path(file: str) -> str:
    """Relative to the working directory when the file lies below it, else absolute."""
    try:
        return str(Path(file).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return file


@dataclass
class _Leaf:
    value: Any
    source: Source


def _wrap(data: Any, file: str | None, note: str = "", line: int | None = None) -> Any:
    """Turn a YAML tree into dicts of _Leaf, with `stages` lists keyed by stage_id."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            key_line = line_of(data, key) or line
            if key == "stages":
                out[key] = _wrap_stages(value, file, note, key_line)
            else:
                out[key] = _wrap(value, file, note, key_line)
        return out
    return _Leaf(data, Source(file, line, note))


def _wrap_stages(stages: Any, file: str | None, note: str, line: int | None) -> dict:
    if not isinstance(stages, list):
        raise ConfigError("'stages' must be a list of stage mappings", file=file, line=line, field="stages")
    out: dict[int, dict] = {}
    for index, stage in enumerate(stages):
        if not isinstance(stage, dict):
            raise ConfigError(f"stages[{index}] must be a mapping", file=file, line=line, field=f"stages[{index}]")
        stage_id = stage.get("stage_id")
        if isinstance(stage_id, bool) or not isinstance(stage_id, int):
            raise ConfigError(f"stages[{index}] needs an integer stage_id, got {stage_id!r}", file=file,
                              line=line_of(stage, "stage_id") or line, field=f"stages[{index}].stage_id")
        if stage_id in out:
            raise ConfigError(f"stage_id {stage_id} appears twice", file=file, line=line_of(stage, "stage_id"),
                              field=f"stages[{index}].stage_id")
        out[stage_id] = _wrap(stage, file, note, line)
    return out


def _merge(base: Any, over: Any, recursive: bool = True) -> Any:
    if isinstance(base, dict) and isinstance(over, dict) and recursive:
        merged = dict(base)
        for key, value in over.items():
            merged[key] = _merge(base[key], value) if key in base else value
        return merged
    return over


def _merge_stage(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        merged[key] = _merge(base[key], value) if key in MERGED_STAGE_KEYS and key in base else value
    return merged


def _merge_stages(base: dict, over: dict) -> dict:
    merged = dict(base)
    for stage_id, stage in over.items():
        merged[stage_id] = _merge_stage(base[stage_id], stage) if stage_id in base else stage
    return dict(sorted(merged.items()))


def _merge_files(base: dict, over: dict) -> dict:
    merged = dict(base)
    for key, value in over.items():
        if key not in base:
            merged[key] = value
        elif key == "stages":
            merged[key] = _merge_stages(base[key], value)
        elif key == "connectors":
            merged[key] = _merge(base[key], value)
        elif key == "platforms" and isinstance(value, dict) and isinstance(base[key], dict):
            platforms = dict(base[key])
            for name, section in value.items():
                old = platforms.get(name)
                if isinstance(old, dict) and isinstance(section, dict):
                    section = {**old, **section,
                               **({"stages": _merge_stages(old["stages"], section["stages"])}
                                  if "stages" in old and "stages" in section else {})}
                platforms[name] = section
            merged[key] = platforms
        else:
            merged[key] = value
    return merged


def _read_chain(path: Path, chain: list[Path]) -> dict:
    path = path.resolve()
    if path in chain:
        loop = " -> ".join(str(p) for p in [*chain, path])
        raise ConfigError(f"base_config forms a cycle: {loop}", file=chain[-1], field="base_config")
    data = load_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError("a deploy config must be a YAML mapping", file=path)
    if "stage_args" in data:
        raise ConfigError("'stage_args' is the removed vllm-omni schema; use 'stages:' entries", file=path,
                          line=line_of(data, "stage_args"), field="stage_args")
    own = _wrap(data, str(path))
    base = data.get("base_config")
    own.pop("base_config", None)
    if base is None:
        return own
    if not isinstance(base, str) or not base:
        raise ConfigError("base_config must be a file path", file=path, line=line_of(data, "base_config"),
                          field="base_config")
    base_path = (path.parent / base).expanduser()
    problem = _not_a_file(base_path)
    if problem:
        raise ConfigError(f"base_config {base!r} {problem} (looked for {base_path})", file=path,
                          line=line_of(data, "base_config"), field="base_config")
    return _merge_files(_read_chain(base_path, [*chain, path]), own)


def _not_a_file(path: Path) -> str | None:
    """Why `path` cannot be read as a deploy file, or None when it can."""
    if path.is_dir():
        return "is a directory, expected a YAML file"
    if not path.exists():
        return "does not exist"
    if not path.is_file():
        return "is not a regular file, expected a YAML file"
    return None


def _value(node: Any) -> Any:
    return node.value if isinstance(node, _Leaf) else node


def _flatten_stage(stage: dict) -> dict:
    """A stage's `runtime:` (devices, num_replicas, env) and `engine_args:` entries become plain stage
    keys, as vllm-omni's _parse_stage_deploy does: runtime wins over the flat keys, engine_args
    entries replace them (dicts merge recursively)."""
    runtime = stage.get("runtime")
    engine_args = stage.get("engine_args")
    if not isinstance(runtime, dict) and not isinstance(engine_args, dict):
        return stage
    flat = {k: v for k, v in stage.items() if k not in ("runtime", "engine_args")}
    if isinstance(engine_args, dict):
        for key, value in engine_args.items():
            if key in STAGE_RESERVED_KEYS:
                continue  # vllm-omni passes these through as opaque engine extras, not stage settings
            flat[key] = _merge(flat[key], value) if isinstance(flat.get(key), dict) else value
    if isinstance(runtime, dict):
        for key in ("devices", "num_replicas", "env"):
            if key in runtime:
                flat[key] = runtime[key]
    return flat


def _flatten_stages(tree: dict) -> dict:
    stages = tree.get("stages")
    if not isinstance(stages, dict):
        return tree
    return {**tree, "stages": {stage_id: _flatten_stage(stage) for stage_id, stage in stages.items()}}


def _platform_stage_overrides(entry: dict) -> tuple[dict, Any, Any]:
    """(overrides, devices, env) of one platform stage entry, in vllm-omni's two layouts: nested
    (`engine_args:` + `runtime:`; flat keys beside them are then ignored) or flat."""
    if "engine_args" in entry:
        engine_args = entry["engine_args"] if isinstance(entry["engine_args"], dict) else {}
        runtime = entry.get("runtime") if isinstance(entry.get("runtime"), dict) else {}
        overrides = dict(engine_args)
        if "num_replicas" in runtime:
            overrides["num_replicas"] = runtime["num_replicas"]
        return overrides, runtime.get("devices"), runtime.get("env")
    overrides = {k: v for k, v in entry.items() if k not in ("stage_id", "devices", "env")}
    return overrides, entry.get("devices"), entry.get("env")


def _apply_platform(tree: dict, platform: str) -> dict:
    sections = tree.get("platforms")
    section = sections.get(platform) if isinstance(sections, dict) else None
    if not isinstance(section, dict):
        return tree
    tree = dict(tree)
    if "model_runner" in section:
        tree["model_runner"] = section["model_runner"]
    stages = dict(tree.get("stages") or {})
    platform_stages = section.get("stages")
    for stage_id, entry in (platform_stages if isinstance(platform_stages, dict) else {}).items():
        if stage_id not in stages:
            continue  # vllm-omni skips overrides for a stage the file does not define
        stage = dict(stages[stage_id])
        overrides, devices, env = _platform_stage_overrides(entry)
        if _value(devices) is not None:
            stage["devices"] = devices
        if _value(env) is not None:
            stage["env"] = {**stage["env"], **env} if isinstance(stage.get("env"), dict) and isinstance(env, dict) \
                else env
        for key, value in overrides.items():
            if key in MERGED_STAGE_KEYS and isinstance(value, dict) and isinstance(stage.get(key), dict):
                stage[key] = {**stage[key], **value}  # one level deep, as vllm-omni merges platform dicts
            else:
                stage[key] = value  # e.g. compilation_config: replaced as a whole
        stages[stage_id] = stage
    tree["stages"] = stages
    return tree


def _unwrap(node: Any, path: tuple, sources: dict) -> Any:
    if isinstance(node, _Leaf):
        sources[path] = node.source
        return copy.deepcopy(node.value)
    if isinstance(node, dict):
        return {key: _unwrap(value, (*path, key), sources) for key, value in node.items()}
    return node


@dataclass
class DeployConfig:
    """A resolved deploy config. `data` has `stages` keyed by stage_id; never mutate it in place."""

    path: Path | None
    platform: str
    data: dict
    sources: dict[tuple, Source] = field(default_factory=dict)

    def stage(self, stage_id: int) -> dict:
        return self.data.get("stages", {}).get(stage_id, {})

    def source(self, *path) -> Source:
        return self.sources.get(tuple(path), Source(None, None, "default"))

    @property
    def sampling(self) -> dict[str, Any]:
        """A copy of stage 0's default_sampling_params (the shared defaults stay untouched)."""
        return copy.deepcopy(self.stage(0).get("default_sampling_params", {}))

    @property
    def default_seed(self) -> int | None:
        return self.sampling.get("seed")

    @property
    def max_num_seqs(self) -> int | None:
        return self.stage(0).get("max_num_seqs")

    @property
    def max_model_len(self) -> int | None:
        return self.stage(0).get("max_model_len")

    @property
    def max_tokens(self) -> int | None:
        return self.sampling.get("max_tokens")

    @property
    def codec_connector(self) -> str | None:
        """Name of the first connector whose `extra` holds codec streaming keys."""
        for name, connector in (self.data.get("connectors") or {}).items():
            extra = connector.get("extra") if isinstance(connector, dict) else None
            if isinstance(extra, dict) and any(k in extra for k in CODEC_STREAM_KEYS):
                return name
        return None

    @property
    def codec_stream(self) -> dict[str, Any]:
        """The codec streaming keys (codec_chunk_frames, ...) of `codec_connector`."""
        name = self.codec_connector
        if name is None:
            return {}
        extra = self.data["connectors"][name]["extra"]
        return {k: copy.deepcopy(extra[k]) for k in CODEC_STREAM_KEYS if k in extra}


def load_deploy(path: str | Path | None, platform: str = "cpu", allow_foreign: bool = False) -> DeployConfig:
    """Resolve a deploy file (base_config chain, then the `platforms.<platform>` section).
    `path=None` gives vllm-omni's MOSS-TTS-Local v1.5 defaults. A file that names another model or
    stage layout is an error, or with `allow_foreign` a DeployWarning."""
    check_platform(platform)
    if path is None:
        tree = _wrap(V1_5_DEFAULTS, None, BUILT_IN)
        file = None
    else:
        file = Path(path).expanduser()
        problem = _not_a_file(file)
        if problem:
            raise ConfigError(f"deploy config {problem}", file=file)
        tree = _read_chain(file, [])
    tree = _apply_platform(_platform_notes(_flatten_stages(tree)), platform)
    sources: dict[tuple, Source] = {}
    data = _unwrap(tree, (), sources)
    config = DeployConfig(file, platform, data, sources)
    _check_platform_sections(config)
    _check_model(config, allow_foreign)  # before the value checks: "wrong model" explains more than a bad value
    _validate(config)
    return config


def check_platform(platform: str) -> None:
    """Refuse a platform name vllm-omni (or moss, for cpu) does not know, suggesting the nearest."""
    if platform not in PLATFORMS:
        raise ConfigError(f"unknown platform {platform!r}{_did_you_mean(platform, PLATFORMS)}; expected one of "
                          f"{', '.join(PLATFORMS)}", field="platform")


def _did_you_mean(name: Any, choices) -> str:
    close = difflib.get_close_matches(str(name), choices, n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _platform_notes(tree: dict) -> dict:
    """Tag the leaves of each platform section so their provenance says which section won."""
    sections = tree.get("platforms")
    if not isinstance(sections, dict):
        return tree

    def tag(node, note):
        if isinstance(node, _Leaf):
            return _Leaf(node.value, Source(node.source.file, node.source.line, note))
        if isinstance(node, dict):
            return {k: tag(v, note) for k, v in node.items()}
        return node

    return {**tree, "platforms": {name: tag(section, f"platforms.{name}") for name, section in sections.items()}}


def _validate(config: DeployConfig) -> None:
    def fail(message: str, *path) -> None:
        src = config.sources.get(tuple(path))
        raise ConfigError(message, file=src.file if src else config.path, line=src.line if src else None,
                          field=".".join(str(p) for p in path))

    stages = config.data.get("stages")
    if not isinstance(stages, dict) or 0 not in stages:
        raise ConfigError("no stage with stage_id 0 (the talker)", file=config.path, field="stages")
    stage0 = stages[0]
    for key in ("max_num_seqs", "max_model_len"):
        value = stage0.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            fail(f"{key} must be a positive integer, got {value!r}", "stages", 0, key)
    params = stage0.get("default_sampling_params", {})
    if not isinstance(params, dict):
        fail("default_sampling_params must be a mapping", "stages", 0, "default_sampling_params")
    path = ("stages", 0, "default_sampling_params")
    checks = {
        "temperature": (lambda v: _number(v) and v >= 0, "a number >= 0"),
        "top_p": (lambda v: _number(v) and 0 < v <= 1, "a number in (0, 1]"),
        "top_k": (lambda v: _integer(v) and v >= -1, "an integer >= -1 (-1 or 0 disables it)"),
        "max_tokens": (lambda v: _integer(v) and v >= 1, "a positive integer"),
        "repetition_penalty": (lambda v: _number(v) and v > 0, "a number > 0"),
        "seed": (lambda v: _integer(v) and -2**63 <= v < 2**63, "an integer in the signed 64-bit range, or null"),
    }
    for key, (ok, expected) in checks.items():
        if params.get(key) is not None and not ok(params[key]):
            fail(f"{key} must be {expected}, got {params[key]!r}", *path, key)
    stream = config.codec_stream
    for key in ("codec_chunk_frames", "initial_codec_chunk_frames", "codec_left_context_frames"):
        if key in stream and not (_integer(stream[key]) and stream[key] >= (1 if key == "codec_chunk_frames" else 0)):
            raise ConfigError(f"{key} must be a non-negative integer, got {stream[key]!r}", file=config.path, field=key)


def _warn(message: str, source: Source | None) -> None:
    """A DeployWarning that points at the YAML line (Python's warning display then quotes it)."""
    if source is not None and source.file is not None:
        warnings.warn_explicit(message, DeployWarning, _display_path(source.file), source.line or 0)
    else:
        warnings.warn(message, DeployWarning, stacklevel=3)


def _check_platform_sections(config: DeployConfig) -> None:
    """model_runner must be v1 or v2 (vllm-omni refuses anything else). A `platforms:` key vllm-omni
    does not know is only a warning: vllm-omni ignores such a section silently, and an out-of-tree
    platform plugin may define more names, but a typo such as `cdua` would otherwise do nothing."""
    runner = config.data.get("model_runner")
    if runner is not None and runner not in MODEL_RUNNERS:
        src = config.source("model_runner")
        raise ConfigError(f"model_runner must be 'v1' or 'v2', got {runner!r}", file=src.file, line=src.line,
                          field="model_runner")
    sections = config.data.get("platforms")
    if sections is None:
        return
    if not isinstance(sections, dict):
        src = config.source("platforms")
        raise ConfigError("'platforms' must be a mapping of platform name to overrides", file=src.file or config.path,
                          line=src.line, field="platforms")
    for name, section in sections.items():
        if name not in PLATFORMS:
            _warn(f"platforms.{name}: {name!r} is not a platform vllm-omni knows{_did_you_mean(name, PLATFORMS)}; "
                  f"this section never applies (known: {', '.join(PLATFORMS)})", _first_source(config, "platforms", name))
        if section is not None and not isinstance(section, dict):
            src = _first_source(config, "platforms", name)
            raise ConfigError(f"platforms.{name} must be a mapping of overrides", file=src.file if src else config.path,
                              line=src.line if src else None, field=f"platforms.{name}")
        runner = section.get("model_runner") if isinstance(section, dict) else None
        if runner is not None and runner not in MODEL_RUNNERS:
            src = config.source("platforms", name, "model_runner")
            raise ConfigError(f"model_runner must be 'v1' or 'v2', got {runner!r}", file=src.file, line=src.line,
                              field=f"platforms.{name}.model_runner")


def _first_source(config: DeployConfig, *prefix) -> Source | None:
    """The source of the first value recorded under `prefix` (for a section, not a single value)."""
    for path, src in config.sources.items():
        if path[:len(prefix)] == prefix:
            return src
    return None


# What marks a deploy file as written for another model. vllm-omni's deploy files carry no model name
# (the pipeline topology is registered in code: MOSS_TTS_LOCAL_PIPELINE in
# vllm_omni/model_executor/models/moss_tts/pipeline.py: model_type moss_tts_local, arch
# MossTTSLocalModel, stages moss_tts_local (talker) and moss_tts_local_codec (MossTTSCodecDecoder)), so
# the signs are: a name that is not MOSS-TTS-Local's where a name may appear, a stage layout other
# than talker + codec, a processor function of another model, or settings only other models use.
IDENTITY_KEYS = ("pipeline", "model", "model_type", "model_arch", "architectures", "model_stage",
                 "model_class_name", "hf_config_name")
PROCESSOR_KEYS = ("custom_process_input_func", "custom_process_next_stage_input_func",
                  "async_chunk_process_next_stage_input_func", "sync_process_input_func")
OTHER_MODELS_KEYS = {"subtalker_sampling_params": "the sub-talker (code predictor) of Qwen3-TTS / Qwen3-Omni"}
MOSS_STAGES = {0: "talker", 1: "codec"}


def _is_moss_local_name(value: Any) -> bool:
    squashed = re.sub(r"[^a-z0-9]", "", str(value).lower())
    return "mossttslocal" in squashed or squashed == "mossttscodecdecoder"


def _foreign_signs(config: DeployConfig) -> list[tuple[str, tuple]]:
    """(reason, path of the value that shows it) for everything that says 'not MOSS-TTS-Local'."""
    signs: list[tuple[str, tuple]] = []

    def names(mapping: dict, path: tuple) -> None:
        for key in IDENTITY_KEYS:
            value = mapping.get(key)
            for item in (value if isinstance(value, list) else [value]):
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
            signs.append((f"it has stages [{layout}], but MOSS-TTS-Local has two: 0 (talker) and 1 (codec)",
                          ("stages", stage_id, "stage_id")))
        if not isinstance(stage, dict):
            continue
        names(stage, ("stages", stage_id))
        extras = stage.get("engine_extras")
        if isinstance(extras, dict):
            names(extras, ("stages", stage_id, "engine_extras"))
        for key, meaning in OTHER_MODELS_KEYS.items():
            if key in stage:
                signs.append((f"stage {stage_id} sets {key}, which only {meaning} uses", ("stages", stage_id, key)))
    return signs


def _check_model(config: DeployConfig, allow_foreign: bool) -> None:
    signs = _foreign_signs(config)
    if not signs:
        return
    reason, path = signs[0]
    src = _first_source(config, *path)
    field = ".".join(str(p) for p in path)
    if not allow_foreign:
        raise ConfigError(f"not a MOSS-TTS-Local deploy file: {reason} (it looks written for another model; "
                          "pass --allow-foreign-deploy to use it anyway)", file=src.file if src else config.path,
                          line=src.line if src else None, field=field)
    for reason, path in signs:
        _warn(f"{'.'.join(str(p) for p in path)}: {reason}; using it anyway (--allow-foreign-deploy)",
              _first_source(config, *path))


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float))


def _integer(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)
