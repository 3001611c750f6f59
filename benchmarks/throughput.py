"""Throughput of `moss synth`'s engine on a random checkpoint of realistic proportions.

    python benchmarks/throughput.py [--repeats 3] [--requests 16] [--frames 40] [--json out.json]

The checkpoint (Qwen3 backbone 6 layers x hidden 512, local transformer, n_vq 12, audio vocab
1024; a v2-layout codec of a few million parameters) is generated on the fly with a fixed seed
and not shipped. Its stop head never fires, so every variant does exactly the same work. The
variants run alternately in one process; each figure is the median of the repeats:

- sequential: max batch 1;  batched-8: continuous batching, max batch 8;
- batch-invariant on (default) and off (--no-batch-invariant), at max batch 8;
- all requests seeded vs all unseeded (global RNG), at max batch 8, invariant.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.table import Table

from moss_cli.assets.build import CodecSizes, TalkerSizes, build
from moss_cli.config.requests import Request
from moss_cli.numerics import Numerics
from moss_cli.pipeline import Synthesizer, SynthOptions

TALKER = TalkerSizes(
    hidden=512, layers=6, heads=8, kv_heads=4, ffn=1536, local_heads=8, local_ffn=1536, n_vq=12, codebook=1024
)
CODEC = CodecSizes(
    d_model=128, heads=4, layers=2, code_dim=128, rvq_dim=64, quantizers=16, codebook=1024, codebook_dim=8
)
DEPLOY = """stages:
  - stage_id: 0
    max_num_seqs: 8
    max_model_len: 4096
    default_sampling_params: {temperature: 1.7, top_p: 0.8, top_k: 25, max_tokens: 4096, repetition_penalty: 1.0}
"""


class PeakRSS:
    """Peak resident memory of this process while the block runs (sampled every 5 ms)."""

    def __enter__(self):
        self.peak, self._stop = _rss(), threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, _rss())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss())


def _rss() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description="moss engine throughput benchmark")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--frames", type=int, default=40, help="frames per request (12.5 frames = 1 s)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    work = Path(tempfile.mkdtemp(prefix="moss-bench-"))
    talker_dir, codec_dir = build(work, TALKER, CODEC, stop_margin=50.0, names=("talker", "codec"))
    (work / "deploy.yaml").write_text(DEPLOY)
    texts = [f"Benchmark request number {i}, with a sentence of ordinary length." for i in range(args.requests)]

    def synthesizer(invariant: bool) -> Synthesizer:
        return Synthesizer(
            SynthOptions(
                deploy=work / "deploy.yaml",
                model=talker_dir,
                codec=codec_dir,
                device=args.device,
                dtype=args.dtype,
                numerics=Numerics(batch_invariant=invariant),
            )
        )

    synths = {True: synthesizer(True), False: synthesizer(False)}
    params = sum(p.numel() for p in synths[True].talker.parameters())
    codec_params = sum(p.numel() for p in synths[True].codec.parameters())

    def requests(seeded: bool) -> list[Request]:
        return [
            Request(id=f"r{i}", text=t, line=i + 1, seed=i if seeded else None, max_new_frames=args.frames)
            for i, t in enumerate(texts)
        ]

    variants = {
        "sequential": (True, 1, True),
        "batched-8 invariant": (True, 8, True),
        "batched-8 fast": (False, 8, True),
        "batched-8 unseeded": (True, 8, False),
    }
    samples: dict[str, list[dict]] = {name: [] for name in variants}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for name, (invariant, max_batch, seeded) in variants.items():
            synth = synths[invariant]
            prepared = synth.prepare(requests(seeded))
            with PeakRSS() as memory:
                start = time.perf_counter()
                results = list(synth.run(prepared, max_batch=max_batch))
                wall = time.perf_counter() - start
            audio_s = sum(r.pcm.shape[0] for r in results) / synth.codec.sample_rate
            frames = sum(r.frames for r in results)
            if repeat:
                samples[name].append({"wall_s": wall, "audio_s": audio_s, "frames": frames, "peak_rss": memory.peak})

    figures = {}
    for name, runs in samples.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        figures[name] = {
            "wall_s": wall,
            "audio_s_per_s": runs[0]["audio_s"] / wall,
            "frames_per_s": runs[0]["frames"] / wall,
            "peak_rss_mb": max(r["peak_rss"] for r in runs) / 2**20,
            "walls": [round(r["wall_s"], 3) for r in runs],
        }
    ratios = {
        "batched8_vs_sequential_throughput": figures["batched-8 invariant"]["audio_s_per_s"]
        / figures["sequential"]["audio_s_per_s"],
        "invariant_vs_fast_wall": figures["batched-8 invariant"]["wall_s"] / figures["batched-8 fast"]["wall_s"],
        "seeded_vs_unseeded_wall": figures["batched-8 invariant"]["wall_s"] / figures["batched-8 unseeded"]["wall_s"],
    }
    targets = {
        "batched8_vs_sequential_throughput": (">=", 3.0),
        "invariant_vs_fast_wall": ("<=", 1.10),
        "seeded_vs_unseeded_wall": ("<=", 1.03),
    }

    console = Console()
    console.print(
        f"talker {params / 1e6:.1f} M params, codec {codec_params / 1e6:.1f} M params, "
        f"{args.requests} requests x {args.frames} frames, {torch.get_num_threads()} threads, "
        f"{args.device}/{args.dtype}, median of {args.repeats}"
    )
    table = Table()
    for column in ("variant", "wall s", "audio s / s", "frames / s", "peak RSS MB"):
        table.add_column(column, justify="right" if column != "variant" else "left")
    for name, f in figures.items():
        table.add_row(
            name,
            f"{f['wall_s']:.2f}",
            f"{f['audio_s_per_s']:.2f}",
            f"{f['frames_per_s']:.1f}",
            f"{f['peak_rss_mb']:.0f}",
        )
    console.print(table)
    for key, value in ratios.items():
        op, target = targets[key]
        ok = value >= target if op == ">=" else value <= target
        console.print(f"{key}: {value:.3f} (target {op} {target}) {'[green]met[/]' if ok else '[red]not met[/]'}")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "figures": figures,
                    "ratios": ratios,
                    "targets": targets,
                    "talker_params": params,
                    "codec_params": codec_params,
                    "threads": torch.get_num_threads(),
                    "device": args.device,
                    "dtype": args.dtype,
                    "requests": args.requests,
                    "frames": args.frames,
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
