"""Plain-value checks shared by every reader of user input (checkpoint configs, deploy files,
request files): a JSON/YAML `true` is not a number, whatever Python's bool says."""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote, urlsplit

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def is_integer(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def is_int64(value: Any) -> bool:
    """An integer in the signed 64-bit range (seeds)."""
    return is_integer(value) and INT64_MIN <= value <= INT64_MAX


def file_uri_path(value: str) -> str | None:
    """The local path a `file://` URI names (percent-decoded), or None where `value` is not one.
    ValueError for a URI with a host other than `localhost`: a file on another machine."""
    if value[:7].lower() != "file://":
        return None
    parts = urlsplit(value)
    if parts.netloc.lower() not in ("", "localhost"):
        raise ValueError(f"file:// URI with a host ({parts.netloc}) names a file on another machine")
    return unquote(parts.path)
