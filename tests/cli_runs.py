"""Helpers for tests that run `moss` commands in this process: request files written from rows,
`moss ARGS` through Typer's CliRunner, and `moss audit-determinism` with its JSON report read back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from typer.testing import CliRunner, Result

from moss_cli.cli.app import app

runner = CliRunner()


def write_rows(path: Path, rows: list[dict]) -> Path:
    """A request file (JSONL): one row a line, in the folder made for it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def flat(text: str) -> str:
    """Rich wraps long lines at the terminal width; compare text with whitespace collapsed."""
    return " ".join(text.split())


def moss(*args) -> Result:
    """`moss ARGS` in this process; paths and numbers are passed as text."""
    return runner.invoke(app, [str(arg) for arg in args])


class AuditRun(NamedTuple):
    exit_code: int
    report: dict  # the --json report; {} where the audit wrote none
    output: str


def moss_audit(
    *args,
    server: str | None = None,
    stagger_ms: int | None = None,
    report: Path | None = None,
    flat_output: bool = False,
) -> AuditRun:
    """`moss audit-determinism ARGS`, against `--server SERVER` (with `--stagger-ms`) when given,
    writing `--json REPORT` when given. An older report there is removed first, so that a run
    that writes none reads as {}; `flat_output` collapses the output's whitespace (see `flat`)."""
    options = ["--server", server] if server is not None else []
    options += ["--stagger-ms", stagger_ms] if stagger_ms is not None else []
    if report is not None:
        report.unlink(missing_ok=True)
        options += ["--json", report]
    result = moss("audit-determinism", *args, *options)
    written = json.loads(report.read_text()) if report is not None and report.exists() else {}
    return AuditRun(result.exit_code, written, flat(result.output) if flat_output else result.output)
