"""The deploy tree: YAML files merged the way vllm-omni's loader merges them, every value
remembering the file and line it came from (base_config chains, engine_args/runtime flattening,
the platform section for the device). See moss_cli/config/deploy.py for the rules."""

from __future__ import annotations

import copy
import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from ..validation import is_integer
from .yaml_lines import line_of, load_yaml

MERGED_STAGE_KEYS = {
    "default_sampling_params",
    "default_pooling_params",
    "subtalker_sampling_params",
    "engine_extras",
    "engine_args",
}
# Stage keys vllm-omni never takes from a stage's `engine_args:` mapping (_STAGE_RESERVED_KEYS).
STAGE_RESERVED_KEYS = {
    "async_chunk",
    "stage_id",
    "devices",
    "num_replicas",
    "env",
    "output_connectors",
    "input_connectors",
    "default_sampling_params",
    "default_pooling_params",
    "engine_extras",
    "engine_args",
    "runtime",
}
BUILT_IN_NOTE = "built-in"


@dataclass(frozen=True)
class Source:
    file: str | None
    line: int | None
    note: str = ""

    def __str__(self) -> str:
        if self.file is None:
            return self.note or BUILT_IN_NOTE
        where = display_path(self.file)
        where = f"{where}:{self.line}" if self.line else where
        return f"{where} ({self.note})" if self.note else where


def display_path(file: str) -> str:
    """Relative to the working directory when the file lies below it, else absolute."""
    try:
        return str(Path(file).resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return file


@dataclass
class _Leaf:
    value: Any
    source: Source


def wrap(data: Any, file: str | None, note: str = "", line: int | None = None) -> Any:
    """Turn a YAML tree into dicts of _Leaf, with `stages` lists keyed by stage_id."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            key_line = line_of(data, key) or line
            if key == "stages":
                out[key] = _wrap_stages(value, file, note, key_line)
            else:
                out[key] = wrap(value, file, note, key_line)
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
        if not is_integer(stage_id):
            spelt = [] if "stage_id" in stage else difflib.get_close_matches("stage_id", map(str, stage), n=1)
            hint = f"; it has {spelt[0]!r}: did you mean 'stage_id'?" if spelt else ""
            got = "none" if stage_id is None else repr(stage_id)
            raise ConfigError(
                f"stages[{index}] needs an integer stage_id, got {got}{hint}",
                file=file,
                line=line_of(stage, spelt[0] if spelt else "stage_id") or line,
                field=f"stages[{index}].stage_id",
            )
        if stage_id in out:
            raise ConfigError(
                f"stage_id {stage_id} appears twice",
                file=file,
                line=line_of(stage, "stage_id"),
                field=f"stages[{index}].stage_id",
            )
        out[stage_id] = wrap(stage, file, note, line)
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
                    section = {
                        **old,
                        **section,
                        **(
                            {"stages": _merge_stages(old["stages"], section["stages"])}
                            if "stages" in old and "stages" in section
                            else {}
                        ),
                    }
                platforms[name] = section
            merged[key] = platforms
        else:
            merged[key] = value
    return merged


def read_chain(path: Path, chain: list[Path]) -> dict:
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
        raise ConfigError(
            "'stage_args' is the removed vllm-omni schema; use 'stages:' entries",
            file=path,
            line=line_of(data, "stage_args"),
            field="stage_args",
        )
    own = wrap(data, str(path))
    base = data.get("base_config")
    own.pop("base_config", None)
    if base is None:
        return own
    if not isinstance(base, str) or not base:
        raise ConfigError(
            "base_config must be a file path", file=path, line=line_of(data, "base_config"), field="base_config"
        )
    base_path = (path.parent / base).expanduser()
    problem = not_a_file(base_path)
    if problem:
        raise ConfigError(
            f"base_config {base!r} {problem} (looked for {base_path})",
            file=path,
            line=line_of(data, "base_config"),
            field="base_config",
        )
    return _merge_files(read_chain(base_path, [*chain, path]), own)


def not_a_file(path: Path) -> str | None:
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


def flatten_stages(tree: dict) -> dict:
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


def apply_platform(tree: dict, platform: str) -> dict:
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
            stage["env"] = (
                {**stage["env"], **env} if isinstance(stage.get("env"), dict) and isinstance(env, dict) else env
            )
        for key, value in overrides.items():
            if key in MERGED_STAGE_KEYS and isinstance(value, dict) and isinstance(stage.get(key), dict):
                stage[key] = {**stage[key], **value}  # one level deep, as vllm-omni merges platform dicts
            else:
                stage[key] = value  # e.g. compilation_config: replaced as a whole
        stages[stage_id] = stage
    tree["stages"] = stages
    return tree


def unwrap(node: Any, path: tuple, sources: dict) -> Any:
    if isinstance(node, _Leaf):
        sources[path] = node.source
        return copy.deepcopy(node.value)
    if isinstance(node, dict):
        return {key: unwrap(value, (*path, key), sources) for key, value in node.items()}
    return node


def platform_notes(tree: dict) -> dict:
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
