"""What `--level speech` costs an audit against `--level waveform`: the built-in set, every server
scenario, against the vllm-omni test double speaking real words (espeak-ng) whose rows flip a code
when they share a step (so compositions differ and the speech level judges them), the two levels
alternating within each repeat in one process.

python benchmarks/speech_level_cost.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from cli_runs import moss_audit  # noqa: E402  (the test helpers: the double and the CLI runner)
from vllm_omni_server import FakeMossLocalEngine, serving_vllm_omni  # noqa: E402

LEVELS = ("waveform", "speech")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    took: dict[str, list[float]] = {level: [] for level in LEVELS}
    deploy = ROOT / "recipes" / "moss_tts_local_v1.5.yaml"
    with serving_vllm_omni(FakeMossLocalEngine(fixed=True, speak=True, shared_steps="flip")) as url:
        for repeat in range(args.repeats):
            for level in LEVELS if repeat % 2 == 0 else LEVELS[::-1]:
                began = time.perf_counter()
                code, _, _ = moss_audit("--deploy", deploy, "--level", level, server=url, stagger_ms=5)
                took[level].append(time.perf_counter() - began)
                print(f"repeat {repeat + 1}, {level}: exit {code}, {took[level][-1]:.1f} s", flush=True)
    for level in LEVELS:
        t = took[level]
        print(f"{level}: median {statistics.median(t):.1f} s [{min(t):.1f}-{max(t):.1f}]")
    ratios = [s / w for s, w in zip(took["speech"], took["waveform"])]
    print(f"speech / waveform: median {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}]")


if __name__ == "__main__":
    main()
