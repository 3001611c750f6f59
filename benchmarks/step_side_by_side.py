"""The engine's decode step against the same step at another commit, side by side in one process.

    python benchmarks/step_side_by_side.py --baseline 52f34a4 [--preset 35m] [--dtype float32]
        [--batch 1,8,32] [--frames 24] [--repeats 5] [--threads 1] [--graphs]

The baseline commit's package is taken out of git (`git archive`) into a temporary folder and
imported under another name next to this checkout's (every import inside the package is relative),
so both run on the same machine at the same moment. Each builds the preset's random weights from the
same seed with its own code (the same weights), packed as `moss bench` packs them; then, per batch
size and repeat, the variants alternate: the baseline's engine, this checkout's engine, and with
`--graphs` this checkout's engine running the whole step as one graph (on a CPU nothing is captured:
the fixed-shape step runs as it is). Every variant runs the invariant mode.

Per variant: the decode step in ms, median [min-max] over the repeats, and the ratio to the baseline
from each repeat's own pair (a shared machine drifts; figures taken together drift together).
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def baseline_package(commit: str, into: Path) -> str:
    """`moss_cli` as of `commit`, importable as `moss_cli_<commit>`."""
    name = f"moss_cli_{commit.replace('-', '_').replace('.', '_')}"
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit, "moss_cli"], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    (into / "moss_cli").rename(into / name)
    sys.path.insert(0, str(into))
    return name


class Variant:
    """One package's engine on its own copy of the preset's random weights."""

    def __init__(self, package: str, options: dict, graphs: bool = False) -> None:
        self.bench = importlib.import_module(f"{package}.bench")
        self.models = importlib.import_module(f"{package}.bench.models")
        self.run = importlib.import_module(f"{package}.bench.run")
        self.layout_of = importlib.import_module(f"{package}.numerics.layout").EngineLayout.fix
        self.numerics = importlib.import_module(f"{package}.numerics").INVARIANT
        self.graphs = graphs
        bench_options = self.bench.BenchOptions(**options)
        device, dtype = torch.device("cpu"), getattr(torch, options["dtype"])
        self.model, _, self.prompts, _ = self.models.load_models(bench_options, device, dtype)

    def step_ms(self, batch: int, frames: int) -> float:
        extra = {"graphs": True} if self.graphs else {}
        layout = self.layout_of(self.model, self.numerics, batch, **extra)
        with torch.inference_mode():
            return 1e3 * self.run._talker_run(self.model, layout, self.prompts, batch, frames).step_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="the commit to compare with")
    parser.add_argument("--preset", default="35m")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    parser.add_argument("--batch", default="1,8,32")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--graphs", action="store_true", help="also this checkout's engine under --graphs")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    batches = [int(b) for b in args.batch.split(",")]
    options = {"random_weights": args.preset, "dtype": args.dtype, "batches": tuple(batches), "frames": args.frames}
    with tempfile.TemporaryDirectory() as folder:
        sys.path.insert(0, str(ROOT))
        variants = {
            f"baseline {args.baseline}": Variant(baseline_package(args.baseline, Path(folder)), options),
            "this checkout": Variant("moss_cli", options),
        }
        if args.graphs:
            variants["this checkout, --graphs"] = Variant("moss_cli", options, graphs=True)
        names = list(variants)
        print(
            f"{args.preset} {args.dtype}, {args.threads} thread(s), {args.frames} frames, invariant mode; "
            f"decode step ms, median [min-max] of {args.repeats}; ratio to the baseline per repeat"
        )
        for batch in batches:
            for variant in variants.values():  # warm-up: allocator, oneDNN's caches, the probes
                variant.step_ms(batch, 4)
            times: dict[str, list[float]] = {name: [] for name in names}
            for repeat in range(args.repeats):
                order = names[repeat % len(names) :] + names[: repeat % len(names)]  # who goes first rotates
                for name in order:
                    times[name].append(variants[name].step_ms(batch, args.frames))
            base = times[names[0]]
            for name in names:
                ratios = [t / b for t, b in zip(times[name], base)]
                print(
                    f"B={batch:<3} {name:32} {statistics.median(times[name]):8.2f} "
                    f"[{min(times[name]):.2f}-{max(times[name]):.2f}]  ratio {statistics.median(ratios):.3f} "
                    f"[{min(ratios):.3f}-{max(ratios):.3f}]"
                )


if __name__ == "__main__":
    main()
