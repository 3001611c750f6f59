"""Peak memory of `moss bench --random-weights PRESET`, per dtype and packing, each in a fresh process.

    python benchmarks/bench_memory.py [--preset v1.5] [--dtypes bfloat16,float32] [--packing on,off]
                                      [--batch 1,8] [--frames 4] [--wait 300]

Per configuration it runs `moss bench --repeats 1 --modes invariant` in a child process and reads the child's
peak resident memory (ru_maxrss from wait4), then prints it next to the talker weights' size and their ratio.
The runs go one at a time; before each, it waits (up to --wait seconds) until /proc/meminfo's MemAvailable holds
1.2x the weights plus 2 GiB, so a run never competes with another process for the last of the memory, and
skips the configuration (saying so) if that never happens.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

import torch

from moss_cli.bench.models import available_memory, preset_configs
from moss_cli.threads import talker_parameters

GIB = 2**30


def peak_rss(command: list[str]) -> tuple[int, float, int]:
    """(exit code, seconds, peak RSS in bytes) of `command` run as a child process."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        sys.stderr.write(child.stderr.read()[-2000:])
    return child.returncode, time.perf_counter() - start, usage.ru_maxrss * 1024  # KiB on Linux


def wait_for(need: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while (available_memory() or 0) < need:
        if time.monotonic() > deadline:
            return False
        time.sleep(15)
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="v1.5")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--packing", default="on,off")
    parser.add_argument("--batch", default="1,8")
    parser.add_argument("--frames", type=int, default=4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--wait", type=float, default=300, help="seconds to wait for enough free memory")
    args = parser.parse_args()
    cfg, _ = preset_configs(args.preset)
    print("| dtype | packing | weights GiB | peak RSS GiB | peak / weights | wall s |")
    print("|---|---|---|---|---|---|")
    for dtype in args.dtypes.split(","):
        weights = talker_parameters(cfg) * torch.finfo(getattr(torch, dtype)).bits // 8
        for packing in args.packing.split(","):
            row = f"| {dtype} | {packing} | {weights / GIB:.2f} |"
            if not wait_for(int(1.2 * weights) + 2 * GIB, args.wait):
                print(f"{row} skipped: MemAvailable stayed under {(1.2 * weights + 2 * GIB) / GIB:.1f} GiB | | |")
                continue
            command = [sys.executable, "-m", "moss_cli", "bench", "--random-weights", args.preset, "--dtype", dtype]
            command += ["--batch", args.batch, "--frames", str(args.frames), "--repeats", "1", "--modes", "invariant"]
            command += ["--threads", str(args.threads)] + ["--no-pack"] * (packing == "off")
            code, wall, peak = peak_rss(command)
            status = "" if code == 0 else f" (exit {code})"
            print(f"{row} {peak / GIB:.2f}{status} | {peak / weights:.3f} | {wall:.0f} |", flush=True)


if __name__ == "__main__":
    main()
