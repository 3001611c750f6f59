"""Deploy configs in the vllm-omni YAML format.

A deploy file has `stages:` (stage 0 = talker, stage 1 = codec), optional `connectors:` whose
`extra` holds codec streaming keys, an optional `base_config:` (another file, relative to this
one, merged under it) and optional `platforms: {cuda|npu|xpu|rocm|cpu: overrides}` applied for
the device in use. Merging follows vllm-omni: stages merge by `stage_id`; within a stage only
the *_params / engine dicts merge key by key, other keys are replaced whole; connectors merge
recursively; other top-level keys are replaced. Keys vllm-omni understands but that mean nothing
offline (devices, gpu_memory_utilization, compilation_config, ...) are accepted and ignored.

Every resolved value remembers the file and line it came from, for `moss config show` and for
error messages.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .yaml_lines import line_of, load_yaml

MERGED_STAGE_KEYS = {"default_sampling_params", "default_pooling_params", "subtalker_sampling_params",
                     "engine_extras", "engine_args"}
CODEC_STREAM_KEYS = ("codec_chunk_frames", "initial_codec_chunk_frames", "codec_chunk_ramp",
                     "codec_left_context_frames")
BUILT_IN = "built-in (published MOSS-TTS-Local v1.5 defaults)"

# The published stage defaults of MOSS-TTS-Local-Transformer-v1.5, used when no deploy file is given.
V1_5_DEFAULTS: dict[str, Any] = {
    "stages": [
        {"stage_id": 0, "max_num_seqs": 64, "max_model_len": 4096,
         "default_sampling_params": {"temperature": 1.7, "top_p": 0.8, "top_k": 25, "max_tokens": 4096,
                                     "seed": 42, "repetition_penalty": 1.0}},
        {"stage_id": 1, "max_num_seqs": 64,
         "default_sampling_params": {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "seed": 42,
                                     "repetition_penalty": 1.0}},
    ],
    "connectors": {"shm": {"name": "SharedMemoryConnector",
                           "extra": {"initial_codec_chunk_frames": 1, "codec_chunk_frames": 15,
                                     "codec_left_context_frames": 0}}},
}


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
    if not base_path.is_file():
        raise ConfigError(f"base_config {base!r} does not exist (looked for {base_path})", file=path,
                          line=line_of(data, "base_config"), field="base_config")
    return _merge_files(_read_chain(base_path, [*chain, path]), own)


def _apply_platform(tree: dict, platform: str) -> dict:
    sections = tree.get("platforms")
    if not isinstance(sections, dict) or platform not in sections:
        return tree
    section = sections[platform]
    if not isinstance(section, dict):
        return tree
    tree = dict(tree)
    if "model_runner" in section:
        tree["model_runner"] = section["model_runner"]
    for stage_id, over in section.get("stages", {}).items():
        stage = dict(tree.get("stages", {}).get(stage_id, {}))
        for key, value in over.items():
            if key in MERGED_STAGE_KEYS or key == "env":
                stage[key] = _merge(stage.get(key, {}), value)
            else:
                stage[key] = value
        tree.setdefault("stages", {})
        tree["stages"] = {**tree["stages"], stage_id: stage}
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


def load_deploy(path: str | Path | None, platform: str = "cpu") -> DeployConfig:
    """Resolve a deploy file (base_config chain, then the `platforms.<platform>` section).
    `path=None` gives the published v1.5 defaults."""
    if path is None:
        tree = _wrap(V1_5_DEFAULTS, None, BUILT_IN)
        file = None
    else:
        file = Path(path).expanduser()
        if not file.is_file():
            raise ConfigError("deploy config does not exist", file=file)
        tree = _read_chain(file, [])
    tree = _apply_platform(_platform_notes(tree), platform)
    sources: dict[tuple, Source] = {}
    data = _unwrap(tree, (), sources)
    config = DeployConfig(file, platform, data, sources)
    _validate(config)
    return config


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


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float))


def _integer(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int)
