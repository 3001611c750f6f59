"""How long `moss synth --dry-run` takes to validate a 10,000-line request file (target: < 10 s),
and how much memory it uses.

    python benchmarks/validate_10k.py [--lines 10000]
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
import time
from pathlib import Path

from moss_cli.jobs.local import synthesize
from moss_cli.pipeline import SynthOptions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=10_000)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="moss-validate-"))
    path = work / "requests.jsonl"
    with path.open("w") as handle:
        for i in range(args.lines):
            record = {
                "id": f"req-{i:06d}",
                "text": f"Utterance number {i}: the quick brown fox jumps over the lazy dog.",
                "max_new_frames": 50 + i % 100,
            }
            if i % 3 == 0:
                record["seed"] = i
            if i % 7 == 0:
                record.update(language="en", audio_temperature=1.2)
            handle.write(json.dumps(record) + "\n")
    start = time.perf_counter()
    summary = synthesize(path, work / "out", SynthOptions(device="cpu"), dry_run=True)
    elapsed = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"validated {summary.requests} requests ({path.stat().st_size / 1e6:.1f} MB) in {elapsed:.2f} s; "
        f"peak RSS {peak:.0f} MB; frame budget {summary.frame_budget}; nothing written: "
        f"{not (work / 'out').exists()}"
    )


if __name__ == "__main__":
    main()
