"""benchmarks/device_check.sh fits a lent GPU machine's time: its steps' limits add up to under 6 minutes,
it leaves at most 8 files, and its table has eager and graphed rows per mode and batch."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "device_check.sh"
BUDGET_S = 6 * 60


def test_the_steps_limits_add_up_to_under_six_minutes_and_it_writes_at_most_8_files():
    text = SCRIPT.read_text()
    limits = [int(s) for s in re.findall(r"^\s*(?:step [\w-]+|timeout) (\d+) ", text, re.MULTILINE)]
    assert len(limits) >= 8 and sum(limits) <= BUDGET_S, limits
    written = set(re.findall(r"\$out/([\w.-]+)", text))
    assert len(written) <= 8, written


@pytest.mark.slow
def test_the_cpu_rehearsal_ends_with_8_files_and_a_table_of_eager_and_graphed_rows(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", str(SCRIPT), "cpu", "tiny"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3 * BUDGET_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert len(list(tmp_path.iterdir())) <= 8, sorted(p.name for p in tmp_path.iterdir())
    summary = (tmp_path / "summary.txt").read_text()
    steps = re.findall(r"^([\w-]+): exit (\d+) in \d+ s$", summary, re.MULTILINE)
    names = ["bench", "bench-graphs", "bench-graphs-compile", "audit", "audit-graphs"]
    assert [name for name, _ in steps][-5:] == names
    assert all(rc == "0" for _, rc in steps), summary
    rows = {tuple(line.split()[:3]) for line in summary.splitlines() if line.startswith(("eager ", "graphs"))}
    modes, batches = ("invariant", "fast"), ("1", "8", "64")
    expected = {(run, mode, batch) for run in ("eager", "graphs") for mode in modes for batch in batches}
    assert rows == expected | {("graphs+compile", mode, "1") for mode in modes}
