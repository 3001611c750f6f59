"""The default audit and the README's main command, on a quiet and on a busy machine.

    python benchmarks/busy_machine.py [--repeats 3] [--tree DIR ...] [--busy 1]

Each tree (a checkout of moss; default: this one) runs `moss audit-determinism` and
`moss synth examples/requests.jsonl` as a user would (a fresh process, default options), once with
the machine otherwise idle and once next to `--busy` processes spinning `while True: pass` (what a
CI runner or a shared workstation looks like). Variants alternate within each repeat so drift in
the machine's load hits them all alike; medians and ranges are printed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
COMMANDS = {
    "audit": ["audit-determinism"],
    "synth": ["synth", "examples/requests.jsonl", "--out", "{out}"],
}


# torch's own default, what moss did before choosing threads itself: every core, and libgomp's
# default wait (spin GOMP_SPINCOUNT=300000 iterations before sleeping).
TORCH_DEFAULT = {"OMP_NUM_THREADS": str(os.cpu_count()), "GOMP_SPINCOUNT": "300000"}
THREAD_KEYS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def run(tree: Path, args: list[str], extra_env: dict) -> float:
    env = {k: v for k, v in os.environ.items() if k not in THREAD_KEYS}
    env.update(extra_env, PYTHONPATH=str(tree))
    with tempfile.TemporaryDirectory() as tmp:
        argv = [sys.executable, "-m", "moss_cli", *(a.format(out=Path(tmp) / "out") for a in args)]
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} in {tree} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def busy(count: int) -> list[subprocess.Popen]:
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tree", type=Path, action="append", help="a moss checkout (repeatable; default: this one)")
    parser.add_argument("--busy", type=int, default=1, help="competing busy processes in the busy condition")
    parser.add_argument("--commands", default="audit,synth")
    parser.add_argument(
        "--torch-default",
        action="store_true",
        help="also run each tree with torch's default threads and OpenMP wait (the old behaviour)",
    )
    args = parser.parse_args()
    trees = [(t.resolve().name, t.resolve(), {}) for t in (args.tree or [HERE])]
    if args.torch_default:
        trees += [(f"{name}+torch-default", tree, TORCH_DEFAULT) for name, tree, _ in list(trees)]
    commands = args.commands.split(",")
    times: dict[tuple, list[float]] = {}
    for repeat in range(args.repeats):
        for load in ("quiet", "busy"):
            spinners = busy(args.busy) if load == "busy" else []
            try:
                for label, tree, env in trees:
                    for name in commands:
                        elapsed = run(tree, COMMANDS[name], env)
                        times.setdefault((label, name, load), []).append(elapsed)
                        print(f"repeat {repeat + 1}: {label:>20} {name:>5} {load:>5} {elapsed:7.1f} s", flush=True)
            finally:
                for p in spinners:
                    p.kill()
                    p.wait()
    print(
        f"\nmedian [min-max] of {args.repeats} runs, wall seconds, {os.cpu_count()} CPUs, busy = {args.busy} spinning "
        "process(es)"
    )
    for (label, name, load), values in times.items():
        print(
            f"{label:>20} {name:>5} {load:>5}: {statistics.median(values):7.1f} [{min(values):.1f}-{max(values):.1f}]"
        )


if __name__ == "__main__":
    main()
