"""Writing a report's files, shared by the audit and `moss diff`: each file at its own path, and a
report folder (the files, the audio of diverging pairs, the HTML page and its plots) replaced whole or
not at all; output paths are checked before any work starts."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import MossError
from ..io.atomic import atomic_dir, check_creatable, write_text_atomic


def json_safe(value):
    """A JSON document with NaN and infinities as null (JSON has neither), numpy scalars as Python's."""
    if hasattr(value, "item") and getattr(value, "shape", None) == ():  # a numpy scalar (a measure's bool_)
        value = value.item()
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value


def write_report_files(texts: dict, explicit: dict, report_dir: Path | None, defaults: dict, pairs, view) -> list[Path]:
    """The report files (`texts`: option -> a function giving the text) at their `explicit` paths and,
    for `report_dir`, a folder written whole or not at all: every one of the `defaults` files (an
    explicit path is a copy elsewhere), whatever `pairs(folder)` writes (the audio of diverging pairs),
    the HTML page of `view()` with its plots, and the marker that lets a later report replace the folder."""
    from .page import write_page

    written = []
    if report_dir is not None:
        with atomic_dir(report_dir) as folder:
            for option, name in defaults.items():
                write_text_atomic(folder / name, texts[option]())
            pairs(folder)
            write_page(folder, view())
            write_text_atomic(folder / MARKER, "moss\n")
            written = [report_dir / p.relative_to(folder) for p in sorted(folder.rglob("*")) if p.is_file()]
    for option, path in explicit.items():  # after the folder: one of them may lie inside it
        if path is not None:
            write_text_atomic(path, texts[option]())
            written.append(path)
    return written


MARKER = ".moss-report"  # a folder holding it was written by moss: a later report may replace it whole
# What reports written before the marker existed hold (files, then folders).
REPORT_ENTRIES = ({"audit.json", "junit.xml", "summary.md", "index.html", "diff.json"}, {"diverging", "plots"})


def replaceable(folder: Path) -> list[str]:
    """Entries of an existing report folder that are not moss's (empty: the folder may be replaced)."""
    if (folder / MARKER).is_file():
        return []
    files, folders = REPORT_ENTRIES
    return sorted(
        p.name for p in folder.iterdir() if not (p.name in files and p.is_file() or p.name in folders and p.is_dir())
    )


def check_output_paths(files: dict[str, Path | None], report_dir: Path | None, defaults: dict[str, str]) -> None:
    """Fail before any work when an output cannot be written, naming the option: a file output
    that is an existing directory, a report directory that is an existing file, holds things moss did
    not write (it is replaced whole), or a parent that is a file or not writable. Missing parent
    directories are fine: the writers create them. `defaults`: the files a report folder holds (as
    well as any explicit path)."""
    if report_dir is not None:
        if report_dir.exists() and not report_dir.is_dir():
            raise MossError("exists and is not a directory", file=report_dir, field="--report-dir")
        if report_dir.is_dir() and not os.access(report_dir, os.W_OK | os.X_OK):
            raise MossError("directory is not writable", file=report_dir, field="--report-dir")
        check_creatable(report_dir.resolve(), "--report-dir")  # the report is built beside it
    outputs = [(option, path) for option, path in files.items() if path is not None]
    if report_dir is not None:
        outputs += [("--report-dir", report_dir / name) for name in defaults.values()]
    for option, path in outputs:
        if path.is_dir():
            raise MossError("is a directory; expected a file path", file=path, field=option)
        check_creatable(path, option)
    if report_dir is not None and report_dir.is_dir():
        foreign = replaceable(report_dir)
        if foreign:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise MossError(
                f"holds files moss did not write ({shown}); a report replaces its folder whole: "
                "give a new or empty directory",
                file=report_dir,
                field="--report-dir",
            )
