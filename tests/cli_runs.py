"""Helpers for tests that run `moss` commands in this process: request files written from rows,
`moss ARGS` through Typer's CliRunner, `moss audit-determinism` with its JSON report read back, and the
tables a command draws at a given console width, checked whole."""

from __future__ import annotations

import importlib
import json
import sys
from contextlib import contextmanager
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


TABLE_MODULES = (
    "moss_cli.cli.app",
    "moss_cli.audit.report",
    "moss_cli.audit.server_report",
    "moss_cli.diff.report",
    "moss_cli.bench.local_report",
    "moss_cli.bench.report",
    "moss_cli.jobs.report",
)


class Drawn(NamedTuple):
    cells: list[list[str]]  # [headers, *rows], Rich markup
    text: str  # the table as drawn, on a console as wide as the command's


@contextmanager
def tables_at(width: int):
    """The commands' console `width` columns wide; yields the list that collects every table drawn
    meanwhile (on any console), to check with `assert_tables_whole`."""
    import io

    from rich.console import Console

    from moss_cli.cli import common
    from moss_cli.report import terminal

    for name in TABLE_MODULES:  # the modules that import print_table lazily, imported now
        importlib.import_module(name)
    drawn: list[Drawn] = []

    def drawing(console, headers, rows, **options):
        rows = [list(row) for row in rows]
        copy = Console(file=io.StringIO(), width=console.width, color_system=None)
        terminal.print_table(copy, headers, rows, **options)
        drawn.append(Drawn([list(headers), *rows], copy.file.getvalue()))
        terminal.print_table(console, headers, rows, **options)

    users = [m for n, m in list(sys.modules.items()) if n.startswith("moss_cli.") and m is not terminal]
    users = [m for m in users if getattr(m, "print_table", None) is terminal.print_table]
    before = common.stdout.width
    common.stdout.width = width
    for module in users:
        module.print_table = drawing
    try:
        yield drawn
    finally:
        common.stdout.width = before
        for module in users:
            module.print_table = terminal.print_table


def assert_tables_whole(drawn: list[Drawn], width: int) -> None:
    """Every table's headers and cells are drawn with no word broken across lines and nothing cut
    short ("…"), and no line is wider than `width` unless it is one word too long for any line."""
    from rich.text import Text

    assert drawn, "no table was drawn"
    for table in drawn:
        assert "…" not in table.text
        lines = table.text.splitlines()
        assert all(len(line) <= width or len(line.split()) == 1 for line in lines), table.text
        tokens = {word.strip(":") for line in lines for word in line.translate({ord(c): " " for c in "│┃"}).split()}
        for row in table.cells:
            for cell in row:
                for word in Text.from_markup(cell).plain.split():
                    assert word.strip(":") in tokens, (word, table.text)
