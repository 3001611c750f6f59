"""How long `moss diff` takes on two runs of 10,000 files each: its I/O (manifests, journals, reading
and hashing every audio file), not synthesis. The runs are synthetic: tiny 16-bit WAVs with a
manifest and a journal as `moss synth` writes them; B is a copy of A, with `--changed N` files in
B given other samples (those are the only ones decoded to waveforms).

    python benchmarks/diff_10k.py [--files 10000] [--changed 0] [--keep DIR]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from moss_cli.diff.compare import diff_runs  # noqa: E402
from moss_cli.diff.sides import load_side  # noqa: E402
from moss_cli.io.audio import pcm_sha256  # noqa: E402
from moss_cli.io.manifest import write_manifest  # noqa: E402

RATE, CHANNELS, SAMPLES = 48_000, 2, 1_920  # 40 ms of stereo: "tiny"


def build_run(out: Path, files: int) -> None:
    out.mkdir(parents=True)
    rng = np.random.default_rng(0)
    rows, journal = [], []
    for i in range(files):
        key = f"utt-{i:05d}"
        pcm = rng.integers(-3000, 3000, size=(SAMPLES, CHANNELS), dtype=np.int16)
        sf.write(str(out / f"{key}.wav"), pcm, RATE, subtype="PCM_16")
        row = {
            "id": key,
            "text": f"Utterance number {i}.",
            "seed": 42,
            "seed_source": "deploy",
            "frames": 1,
            "duration_s": SAMPLES / RATE,
            "sample_rate": RATE,
            "channels": CHANNELS,
            "codes_sha256": hashlib.sha256(key.encode()).hexdigest(),
            "pcm_sha256": pcm_sha256(pcm),
            "file": f"{key}.wav",
            "audio_temperature": 1.7,
            "audio_top_p": 0.8,
            "audio_top_k": 25,
            "audio_repetition_penalty": 1.0,
        }
        rows.append(row)
        journal.append(json.dumps({"fingerprint": hashlib.sha256(key.encode()).hexdigest(), "row": row}))
    write_manifest(out / "manifest.csv", rows)
    (out / ".moss").mkdir()
    (out / ".moss" / "journal.jsonl").write_text("\n".join(journal) + "\n")


def change(out: Path, count: int) -> None:
    """Other samples (and their hash in the manifest) for the first `count` files: as if re-synthesised."""
    import csv

    manifest = out / "manifest.csv"
    with manifest.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    for row in rows[:count]:
        path = out / row["file"]
        pcm, _ = sf.read(str(path), dtype="int16", always_2d=True)
        pcm = pcm[::-1].copy()
        sf.write(str(path), pcm, RATE, subtype="PCM_16")
        row["pcm_sha256"] = pcm_sha256(pcm)
        row["seed"] = "7"
    with manifest.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--changed", type=int, default=0, help="files of B with other samples")
    parser.add_argument("--keep", type=Path, help="build the runs here and keep them")
    args = parser.parse_args()
    base = args.keep or Path(tempfile.mkdtemp(prefix="moss-diff-10k-"))
    try:
        began = time.perf_counter()
        build_run(base / "a", args.files)
        shutil.copytree(base / "a", base / "b")
        change(base / "b", args.changed)
        print(f"built two runs of {args.files} files in {time.perf_counter() - began:.1f} s ({base})")

        began = time.perf_counter()
        result = diff_runs(load_side(base / "a", "A"), load_side(base / "b", "B"))
        took = time.perf_counter() - began
        differ = sum(c.failed for c in result.cases)
        per_id = took / len(result.cases) * 1e6
        print(f"diff_runs: {len(result.cases)} ids, {differ} differ, {took:.2f} s ({per_id:.0f} us per id)")

        began = time.perf_counter()
        command = ["diff", str(base / "a"), str(base / "b"), "--json", str(base / "d.json")]
        cli = subprocess.run(
            [sys.executable, "-m", "moss_cli", *command],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"moss diff (a new process, --json): exit {cli.returncode}, {time.perf_counter() - began:.2f} s wall")
    finally:
        if args.keep is None:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
