"""benchmarks/before_after.py, small: another commit's engine beside this checkout's in one process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # two engines, eager and --graphs: about 15 s
def test_the_checkout_against_its_own_commit_gives_the_same_codes():
    args = ["--commit", "HEAD", "--batches", "1,2", "--frames", "3", "--repeats", "2"]
    run = subprocess.run(
        [sys.executable, "benchmarks/before_after.py", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr
    rows = [line for line in run.stdout.splitlines() if " B=" in line]
    assert [line.split(":")[0].split() for line in rows] == [
        ["eager", "B=1"], ["eager", "B=2"], ["graphs", "B=1"], ["graphs", "B=2"]
    ]  # fmt: skip
    assert all(line.endswith("same codes: True") and "new/old" in line for line in rows), run.stdout
