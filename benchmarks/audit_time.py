"""How long the default audit takes on the embedded model (target: under a minute on 2 CPU cores).

python benchmarks/audit_time.py [--repeats 3] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from moss_cli.audit.runner import AuditOptions, run_audit
from moss_cli.pipeline import SynthOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        result = run_audit(AuditOptions(synth=SynthOptions(device="cpu")))
        times.append(time.perf_counter() - start)
        assert result.passed, "the default audit should pass"
    print(
        f"default audit ({len(result.cases)} comparisons, {torch.get_num_threads()} threads): "
        f"median {statistics.median(times):.1f} s, min {min(times):.1f} s, max {max(times):.1f} s"
    )


if __name__ == "__main__":
    main()
