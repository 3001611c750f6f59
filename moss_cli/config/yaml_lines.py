"""Safe YAML loading that remembers the line of every mapping key, for error messages."""

from __future__ import annotations

from pathlib import Path

import yaml

from ..errors import ConfigError


class LineDict(dict):
    """A dict from YAML that knows the 1-based line of each key (`lines`)."""

    lines: dict


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            raise ConfigError("a mapping key must be a scalar", line=key_node.start_mark.line + 1) from None
        out[key] = loader.construct_object(value_node, deep=True)
        out.lines[key] = key_node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(path: Path):
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError("file does not exist", file=path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"cannot read: {e}", file=path) from None
    try:
        return yaml.load(text, Loader=_Loader)  # SafeLoader underneath: no arbitrary objects
    except ConfigError as e:
        raise ConfigError(e.message, file=path, line=e.line) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        problem = getattr(e, "problem", None) or str(e)
        raise ConfigError(f"invalid YAML: {problem}", file=path, line=mark.line + 1 if mark else None) from None


def line_of(mapping, key) -> int | None:
    return getattr(mapping, "lines", {}).get(key)
