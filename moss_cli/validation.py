"""Plain-value checks shared by every reader of user input (checkpoint configs, deploy files,
request files): a JSON/YAML `true` is not a number, whatever Python's bool says."""

from __future__ import annotations

from typing import Any

INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float))


def is_integer(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int)


def is_int64(value: Any) -> bool:
    """An integer in the signed 64-bit range (seeds)."""
    return is_integer(value) and INT64_MIN <= value <= INT64_MAX
