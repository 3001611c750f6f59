"""User-facing errors.

Every problem caused by the user's input (a request file, a deploy config, a checkpoint
directory) is raised as a `MossError` that names where it happened. The CLI prints it without a
traceback and exits with code 2.
"""

from __future__ import annotations

from pathlib import Path


class MossError(Exception):
    """A problem with user input, reported with its location."""

    def __init__(
        self, message: str, *, file: str | Path | None = None, line: int | None = None, field: str | None = None
    ) -> None:
        self.message = message
        self.file = str(file) if file is not None else None
        self.line = line
        self.field = field
        super().__init__(self.describe())

    def describe(self) -> str:
        where = ""
        if self.file is not None:
            where = self.file
            if self.line is not None:
                where += f":{self.line}"
        if self.field is not None and not _begins_with(self.message, self.field):
            where = f"{where} [{self.field}]" if where else f"[{self.field}]"
        return f"{where}: {self.message}" if where else self.message


def _begins_with(message: str, field: str) -> bool:
    """Whether the message opens with the field's name ("--timeout: must be > 0", "n_vq must be
    positive"), which then is not shown twice; "--ray-address ..." does not open with "--ray"."""
    rest = message[len(field) :] if message.startswith(field) else None
    return rest is not None and not (rest[:1].isalnum() or rest[:1] in ("_", "-", ".", "["))


class CheckpointError(MossError):
    """A checkpoint directory is missing files, or its tensors do not fit its config."""


class ConfigError(MossError):
    """A config file (model config.json or deploy YAML) is invalid."""
