"""The README's two commands are the whole set-up: each starts with scripts/setup.sh, `.ci/run` is
the second verbatim, the first works from a fresh clone, and set-up installs what each mode needs
once (a second run installs nothing)."""

from __future__ import annotations

import csv
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SETUP = ROOT / "scripts" / "setup.sh"


def _commands() -> list[str]:
    """The indented command lines of the README's "Two commands" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [line[4:] for line in section.splitlines() if line.startswith("    ") and line.strip()]


def test_the_readme_has_two_commands_that_each_set_up_first():
    first, second = _commands()
    assert first.startswith("bash scripts/setup.sh && ") and "/moss synth " in first
    assert second.startswith("bash scripts/setup.sh --tests && ") and second.endswith(".venv/bin/python -m pytest")


def test_ci_runs_the_readme_second_command_verbatim_then_the_dependency_ranges():
    lines = [line for line in (ROOT / ".ci" / "run").read_text().splitlines() if line and not line.startswith("#")]
    ranges = "bash scripts/test_dependency_ranges.sh"  # its own venvs: it sets up nothing the command uses
    assert lines == ["set -euo pipefail", 'cd "$(dirname "$0")/.."', _commands()[1], ranges]
    assert f"`{ranges}`" in (ROOT / "README.md").read_text()


def _clone(tmp_path: Path) -> Path:
    """The tracked files of this checkout, as a fresh clone has them (no .venv, no outputs)."""
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, files.decode().split("\0")):
        source = ROOT / name
        if source.is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, clone / name)
    return clone


def _fake_venv(clone: Path, log: Path) -> None:
    """A .venv whose python records what it is asked to do (pip included) and succeeds."""
    bin_dir = clone / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("python", "moss"):
        (bin_dir / name).write_text(f'#!/bin/sh\necho "$*" >> "{log}"\n')
        (bin_dir / name).chmod(0o755)


def _setup(clone: Path, *args: str, tools: Path) -> subprocess.CompletedProcess:
    # a `chromium` on PATH: the --tests set-up then has nothing to install with apt-get
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    return subprocess.run(["bash", "scripts/setup.sh", *args], cwd=clone, env=env, capture_output=True, text=True)


@pytest.fixture
def tools(tmp_path) -> Path:
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "chromium").write_text("#!/bin/sh\nexit 0\n")
    (tools / "chromium").chmod(0o755)
    return tools


def test_setup_installs_each_mode_once_and_then_nothing(tmp_path, tools):
    clone, log = _clone(tmp_path), tmp_path / "calls.log"
    _fake_venv(clone, log)

    assert _setup(clone, tools=tools).returncode == 0
    plain = log.read_text()
    assert "-m pip install --quiet -e ." in plain and ".[test]" not in plain

    log.write_text("")
    again = _setup(clone, tools=tools)
    assert again.returncode == 0 and "up to date" in again.stderr and log.read_text() == ""

    tests = _setup(clone, "--tests", tools=tools)
    assert tests.returncode == 0 and "-e .[test]" in log.read_text()
    log.write_text("")
    for args in ((), ("--tests",)):  # a tests set-up covers a plain one too
        done = _setup(clone, *args, tools=tools)
        assert done.returncode == 0 and "up to date" in done.stderr
    assert log.read_text() == ""

    (clone / "pyproject.toml").write_text((clone / "pyproject.toml").read_text() + "\n# changed\n")
    assert _setup(clone, tools=tools).returncode == 0 and "pip install" in log.read_text()  # what it asks for changed


def test_setup_refuses_an_unknown_option(tmp_path, tools):
    refused = _setup(_clone(tmp_path), "--fast", tools=tools)
    assert refused.returncode == 2 and "unknown option '--fast'" in refused.stderr


@pytest.mark.slow  # the embedded model synthesises the examples in a separate process
def test_the_first_command_runs_verbatim_in_a_fresh_clone(tmp_path, tools):
    """With this checkout's .venv standing in for the one set-up makes (so the test needs no package
    index), the first command runs as written and writes the audio and the manifest."""
    stamp = ROOT / ".venv" / ".moss-setup-tests"
    digest = hashlib.sha256(SETUP.read_bytes() + (ROOT / "pyproject.toml").read_bytes()).hexdigest()[:16]
    if not (ROOT / ".venv" / "bin" / "moss").exists() or not stamp.exists() or stamp.read_text().strip() != digest:
        # never let set-up install into this checkout's own .venv from the clone
        pytest.skip("this checkout's .venv is not up to date with scripts/setup.sh --tests")
    clone = _clone(tmp_path)
    (clone / ".venv").symlink_to(ROOT / ".venv")
    env = {**os.environ, "PATH": f"{tools}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", _commands()[0]], cwd=clone, env=env, capture_output=True, text=True)
    assert done.returncode == 0 and "up to date" in done.stderr, done.stdout + done.stderr
    with open(clone / "out" / "manifest.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    requests = [line for line in (clone / "examples" / "requests.jsonl").read_text().splitlines() if line.strip()]
    assert len(rows) == len(requests) and all((clone / "out" / r["file"]).stat().st_size > 44 for r in rows)
