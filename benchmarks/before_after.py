"""The engine's decode step at another commit and in this checkout, in one process, alternated: do a
refactor's codes stay the same bits, and its step the same speed?

The other commit's `moss_cli` is unpacked (`git archive`) under another package name, so both load
side by side; each builds the tiny checkpoint and runs the same requests (every request its own
seed, the stop head ignored) through its own `Engine`, eager and with `--graphs`, at each batch size.
Prints milliseconds per engine step (median and quartiles of the repeats), each repeat's new/old
ratio, and whether every request's codes are equal across the two.

    python benchmarks/before_after.py --commit 5cf6e62 [--batches 1,8] [--frames 64] [--repeats 12]
"""

from __future__ import annotations

import argparse
import importlib
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
OLD = "moss_before"  # the other commit's package, renamed


def unpack(commit: str, into: Path) -> None:
    """`commit`'s moss_cli as the package `OLD` under `into`."""
    archive = subprocess.run(["git", "archive", commit, "moss_cli"], cwd=ROOT, check=True, capture_output=True)
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    (into / "moss_cli").rename(into / OLD)
    for path in (into / OLD).rglob("*.py"):
        path.write_text(re.sub(r"\bmoss_cli\b", OLD, path.read_text()))


def engine_run(package: str, batch: int, graphs: bool, frames: int):
    """A function that runs the requests once on a fresh engine: (ms per step, codes by request)."""
    pkg = importlib.import_module(package)
    part = lambda name: importlib.import_module(f"{package}.{name}")  # noqa: E731
    talker = pkg.load_talker(part("assets").TINY_TALKER, device="cpu", dtype="float32")
    sampling = part("sampling_params")
    layout = part("numerics.layout").EngineLayout.fix(talker.model, part("numerics").INVARIANT, batch, graphs=graphs)
    requests = [
        part("engine.requests").GenerationRequest(
            str(i),
            talker.prompt(f"request {i} of a batch of {batch}"),
            frames,
            sampling.AUDIO_DEFAULTS,
            sampling.STOP_HEAD_DEFAULTS,
            rng=i,
            ignore_stop=True,
        )
        for i in range(batch)
    ]
    engine_class = part("engine.scheduler").Engine

    def run():
        engine = engine_class(talker.model, max_batch=batch, layout=layout)
        start = time.perf_counter()
        codes = {r.key: r.codes for r in engine.run(requests)}
        return (time.perf_counter() - start) / frames * 1e3, codes

    return run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commit", required=True, help="the commit to compare this checkout with")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--frames", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=12)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    folder = Path(tempfile.mkdtemp(prefix="before-after-"))
    unpack(args.commit, folder)
    sys.path.insert(0, str(folder))
    print(f"{args.commit} (old) against this checkout (new): tiny talker, float32, {args.threads} thread(s), "
          f"{args.frames} frames, {args.repeats} alternated repeats; ms per engine step")  # fmt: skip
    for graphs in (False, True):
        for batch in (int(b) for b in args.batches.split(",")):
            runs = {
                "old": engine_run(OLD, batch, graphs, args.frames),
                "new": engine_run("moss_cli", batch, graphs, args.frames),
            }
            for run in runs.values():
                run()  # warm-up
            times, codes = {name: [] for name in runs}, {}
            for _ in range(args.repeats):
                for name, run in runs.items():
                    ms, codes[name] = run()
                    times[name].append(ms)
            same = codes["old"].keys() == codes["new"].keys() and all(
                torch.equal(codes["old"][k], codes["new"][k]) for k in codes["old"]
            )
            cells = []
            for name, ms in times.items():
                low, _, high = statistics.quantiles(ms, n=4)
                cells.append(f"{name} {statistics.median(ms):.3f} [{low:.3f}-{high:.3f}]")
            ratios = [n / o for n, o in zip(times["new"], times["old"])]
            ratio = f"{statistics.median(ratios):.3f} [{min(ratios):.3f}-{max(ratios):.3f}]"
            step = "graphs" if graphs else "eager"
            print(f"{step:6} B={batch}: {'  '.join(cells)}  new/old {ratio}  same codes: {same}", flush=True)


if __name__ == "__main__":
    main()
