"""Files that appear whole or not at all: written under a temporary name in the same directory,
renamed into place once complete (a rename within one file system is atomic)."""

from __future__ import annotations

import errno
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ..errors import MossError

TEMPORARY_GLOB = ".*.tmp-*"  # what a killed writer leaves behind (see io/resume.py)
_CAUSES = {
    errno.ENOSPC: "disk full",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only file system",
    errno.EACCES: "permission denied",
    errno.EPERM: "permission denied",
    errno.ENOTDIR: "a parent is a file, not a directory",
}


def check_creatable(path: Path, option: str) -> None:
    """Fail before any work when `path` cannot be created or replaced: the nearest folder above it
    that exists must be a folder this process may write in (missing folders are created)."""
    existing = next((parent for parent in path.parents if parent.exists()), Path("."))
    if not existing.is_dir():
        raise MossError(f"cannot create it: {existing} is a file, not a directory", file=path, field=option)
    if not os.access(existing, os.W_OK | os.X_OK):  # also false on a read-only file system, even for root
        raise MossError(f"cannot create it: {existing} is not writable", file=path, field=option)


@contextmanager
def writing(path: Path, option: str) -> Iterator[None]:
    """Turn a failed write into an error naming the file and the cause (exit 2, no traceback)."""
    try:
        yield
    except OSError as e:
        cause = _CAUSES.get(e.errno) or e.strerror or str(e)
        raise MossError(f"cannot write it: {cause}", file=path, field=option) from None
    except RuntimeError as e:  # libsndfile's own errors: "System error." says no more than that
        full = shutil.disk_usage(next(p for p in path.parents if p.exists())).free == 0
        raise MossError(f"cannot write it: {'disk full' if full else e}", file=path, field=option) from None


def temporary_name(path: Path) -> Path:
    """The hidden name a file is written under before it is renamed to `path`."""
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """Yield a temporary path to write; on success it replaces `path`, on failure it is removed."""
    tmp = temporary_name(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_text_atomic(path: Path, text: str) -> None:
    """A report or baseline: its folder is created if missing (reports go where the user points)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


@contextmanager
def atomic_dir(path: Path) -> Iterator[Path]:
    """Yield a temporary folder beside `path` to fill; on success it takes the place of `path` (an
    earlier folder there is moved aside, then removed), on failure it is removed. A reader sees the
    old folder or the new one, never a half-written one."""
    import shutil

    path = Path(os.path.abspath(path))  # "." has no name to put a sibling beside
    tmp = temporary_name(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        yield tmp
        old = path.with_name(f".{path.name}.old-{os.getpid()}")
        if path.exists():
            os.replace(path, old)
        os.replace(tmp, path)
        shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
