"""How long the server audit's search for responses with another request's audio takes in one run
(audit/mixups.py), for N responses of one length: the worst case for its length and norm filters.

python benchmarks/mixups_time.py [--responses 300] [--seconds 3] [--repeats 3]

`equal norms`: white noise at one level, so every earlier clip is a candidate by its norm and only
the subset check rejects it; `spread norms`: levels spread over 15 dB, as speech of different texts
and voices is. One pair in each set is a near copy (its last bits off), which must be found.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from moss_cli.audit.mixups import find_mixups
from moss_cli.io.audio import pcm_sha256
from moss_cli.io.outcome import Outcome

RATE = 48_000


def responses(count: int, seconds: float, spread: bool, rng: np.random.Generator) -> dict[str, Outcome]:
    outputs = {}
    for i in range(count):
        level = 3000 * 10 ** (rng.uniform(-0.5, 0.25) if spread else 0.0)
        pcm = (rng.standard_normal((int(seconds * RATE), 2)) * level).astype("<i2")
        if i == count - 1:  # a near copy of the first: what must be found
            pcm = next(iter(outputs.values())).pcm ^ np.int16(1)
        outputs[f"r{i}"] = Outcome(f"r{i}", pcm, RATE, pcm_sha256(pcm), "unknown", content={"text": f"text {i}"})
    return outputs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--responses", type=int, default=300)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    for spread in (False, True):
        outputs = responses(args.responses, args.seconds, spread, rng)
        order = {key: i for i, key in enumerate(outputs)}
        times = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            found = find_mixups(outputs, order, 60.0)
            times.append(time.perf_counter() - start)
        assert [m.members for m in found] == [["r0", f"r{args.responses - 1}"]], "the near copy must be found"
        print(
            f"{'spread' if spread else 'equal'} norms, {args.responses} responses of {args.seconds:g} s stereo: "
            f"median {statistics.median(times) * 1e3:.0f} ms, min {min(times) * 1e3:.0f} ms per run"
        )


if __name__ == "__main__":
    main()
